"""Bad (torch-graph-break): a Python branch on a tensor value splits the compiled graph.

backend="eager" keeps this example fast: graph breaks are found by Dynamo, whatever the backend.
"""

import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))


def forward(x):
    y = model(x)
    if y.mean() > 0:  # data-dependent Python control flow: Dynamo must break the graph here
        y = y * 2
    return y


compiled = torch.compile(forward, backend="eager")
opt = torch.optim.SGD(model.parameters(), lr=1e-2)
x = torch.randn(8, 16)
for _ in range(5):
    loss = compiled(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print("done")
