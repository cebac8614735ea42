"""A tiny torch loop whose thread pool is larger than the machine: ``torch.set_num_threads`` of the cores plus
four (copied from a bigger machine). It prints the thread count each step ran at (the doctor's thread check
switches it for its fixed blocks and back)."""

import os

import torch

torch.set_num_threads((os.cpu_count() or 1) + 4)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
x, y = torch.randn(256, 64), torch.randn(256, 1)
seen = []
for _ in range(24):
    seen.append(torch.get_num_threads())
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
print("THREADS", ",".join(map(str, seen)))
