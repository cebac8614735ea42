"""A PyTorch LM loop in the style of pytorch/examples' word_language_model: no torch.optim (manual SGD on
p.data), gradient clipping, and the loss read on the host every batch (total_loss += loss.item())."""

import torch
import torch.nn as nn

torch.manual_seed(0)
NTOKENS, BPTT, BATCH, LR = 200, 16, 8, 20.0


class RNNModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Embedding(NTOKENS, 32)
        self.rnn = nn.LSTM(32, 32)
        self.decoder = nn.Linear(32, NTOKENS)

    def forward(self, x, hidden):
        out, hidden = self.rnn(self.encoder(x), hidden)
        return self.decoder(out).view(-1, NTOKENS), hidden


def get_batch(source, i):
    seq_len = min(BPTT, len(source) - 1 - i)
    return source[i:i + seq_len], source[i + 1:i + 1 + seq_len].reshape(-1)


data = torch.randint(0, NTOKENS, (4000,)).view(-1, BATCH)  # (time, batch), as batchify() makes it
model = RNNModel()
criterion = nn.NLLLoss()
hidden = (torch.zeros(1, BATCH, 32), torch.zeros(1, BATCH, 32))
total_loss = 0.0
batches = range(0, data.size(0) - 1, BPTT)
for i in batches:
    x, targets = get_batch(data, i)
    hidden = tuple(h.detach() for h in hidden)
    model.zero_grad()
    output, hidden = model(x, hidden)
    loss = criterion(torch.log_softmax(output, -1), targets)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
    for p in model.parameters():
        p.data.add_(p.grad, alpha=-LR)
    total_loss += loss.item()
print("mean loss", total_loss / len(batches))
