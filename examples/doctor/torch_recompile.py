"""Bad (torch-recompile): the batch size changes, so torch.compile recompiles the model.

backend="eager" keeps this example fast: recompiles are decided by Dynamo's guards, whatever the backend.
"""

import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
compiled = torch.compile(model, backend="eager")
opt = torch.optim.SGD(model.parameters(), lr=1e-2)
for step in range(6):
    x = torch.randn(8 + step, 16)  # a new batch size every step
    loss = compiled(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print("done")
