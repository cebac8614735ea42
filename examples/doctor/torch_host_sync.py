"""Bad (torch-host-sync): loss.item() every step; on a GPU each one drains the queue."""

import torch

torch.manual_seed(0)
model = torch.nn.Linear(32, 1)
opt = torch.optim.SGD(model.parameters(), lr=1e-2)
x = torch.randn(16, 32)
for step in range(8):
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step} loss {loss.item():.4f}")  # device -> host read every step
