"""PyTorch with torch.compile (the model; backend="aot_eager", no Inductor build) fed by a DataLoader over
in-memory tensors, AdamW, the loss read on the host every 20 steps."""

import torch
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
xs = torch.randn(2048, 32)
ys = xs.sum(-1, keepdim=True)
loader = DataLoader(TensorDataset(xs, ys), batch_size=32, shuffle=True, drop_last=True)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 1))
compiled = torch.compile(model, backend="aot_eager")
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for step, (x, y) in enumerate(loader):
    loss = torch.nn.functional.mse_loss(compiled(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if step % 20 == 0:
        print(f"step {step} loss {loss.item():.4f}")
