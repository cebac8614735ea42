"""Clean: PyTorch eager, loss accumulated on the device and read once at the end.

The doctor should find nothing of severity warning or worse here.
"""

import torch

STEPS, BATCH, DIM = 30, 32, 64
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(DIM, 256), torch.nn.GELU(), torch.nn.Linear(256, 1))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
xs = torch.randn(STEPS, BATCH, DIM)
ys = xs.sum(-1, keepdim=True)
running = torch.zeros(())
for i in range(STEPS):
    loss = torch.nn.functional.mse_loss(model(xs[i]), ys[i])
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    running += loss.detach()
print(f"mean loss {(running / STEPS).item():.4f}")
