"""Bad (input-bound): a slow Dataset read in the training process, so the loop waits for every batch."""

import time

import torch
from torch.utils.data import DataLoader, Dataset


class SlowDataset(Dataset):
    def __len__(self):
        return 96

    def __getitem__(self, i):
        time.sleep(0.004)  # decoding/tokenising per sample, in the main process (num_workers=0)
        return torch.randn(16), torch.randn(1)


torch.manual_seed(0)
model = torch.nn.Linear(16, 1)
opt = torch.optim.SGD(model.parameters(), lr=1e-2)
for x, y in DataLoader(SlowDataset(), batch_size=8):
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
print("done")
