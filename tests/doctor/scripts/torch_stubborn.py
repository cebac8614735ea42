"""A PyTorch loop whose forward and backward outweigh its optimizer step, reading the loss every step, that then
ignores SIGTERM and never ends: the doctor's --timeout must kill it and still report what it saw."""

import signal
import time

import torch

signal.signal(signal.SIGTERM, signal.SIG_IGN)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.Tanh(), torch.nn.Linear(512, 512), torch.nn.Tanh(),
                            torch.nn.Linear(512, 512))
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
batches = [torch.randn(256, 512) for _ in range(4)]
for i in range(30):
    x = batches[i % 4]
    loss = (model(x) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {i} loss {loss.item():.4f}")
while True:  # stuck after training (a hung evaluation, a thread that never joins)
    time.sleep(0.05)
