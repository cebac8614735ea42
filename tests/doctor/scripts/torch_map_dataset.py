"""A PyTorch loop over a map-style Dataset whose ``__getitem__`` does per-item tensor work, as torchvision's MNIST
does (``int(self.targets[index])``, the image converted and normalised one item at a time), the DataLoader in the
main process. The loop itself reads the loss only every 50 steps."""

import torch
from torch.utils.data import DataLoader, Dataset


class ItemDataset(Dataset):
    def __init__(self, n=2048):
        g = torch.Generator().manual_seed(0)
        self.data = torch.randint(0, 256, (n, 28, 28), dtype=torch.uint8, generator=g)
        self.targets = torch.randint(0, 10, (n,), generator=g)

    def __len__(self):
        return len(self.data)

    def __getitem__(self, index):
        img, target = self.data[index], int(self.targets[index])
        img = img.float().div(255).unsqueeze(0)
        img = (img - 0.1307) / 0.3081
        return img, target


torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step, (x, y) in enumerate(DataLoader(ItemDataset(), batch_size=64, shuffle=True)):
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 50 == 0:
        print(f"step {step} loss {loss.item():.4f}")
