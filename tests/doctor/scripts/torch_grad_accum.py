"""Gradient accumulation as nanoGPT's train.py does it: 10 loss.backward() calls (micro-steps) per
optimizer step. The step is the optimizer's, so --steps N counts optimizer steps, not micro-steps."""

import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
ACCUMULATE = 10  # more micro-steps than the --steps the test gives
X, Y = torch.randn(ACCUMULATE, 8, 16), torch.randn(ACCUMULATE, 8, 1)

for _step in range(50):
    for micro in range(ACCUMULATE):
        loss = torch.nn.functional.mse_loss(model(X[micro]), Y[micro]) / ACCUMULATE
        loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
