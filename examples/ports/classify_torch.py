"""A user's text classifier in PyTorch: a small BERT-style encoder over sentences of varying length.

The corpus's torch side (examples/ports/README.md): a realistic script, not twinbench's code. Each batch of
sentences is padded to its own longest (dynamic padding: free in eager PyTorch), the loss is kept on the
device and read once at the end. Two realistic mistakes can be switched on to make this side the slow one:

- ``--threads N`` above the cores: ``torch.set_num_threads(8)`` copied from a bigger machine;
- ``--tokenize-in-loader``: the Dataset tokenizes raw text in ``__getitem__`` in the main process, every epoch.

At the end it prints ``step_ms=...``: the mean step after the first ``WARM`` (the benchmark's A/B reads it).
"""

import argparse
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=12)
p.add_argument("--batch", type=int, default=8)
p.add_argument("--dim", type=int, default=32, help="the model's width (a pair whose cause is compute takes a wider one)")
p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (1: the corpus runs on a shared 2-core machine)")
p.add_argument("--tokenize-in-loader", action="store_true", help="tokenize the raw text in __getitem__")
args = p.parse_args()
if args.threads > 0:
    torch.set_num_threads(args.threads)

VOCAB, D, HEADS, LAYERS, MAX_LEN, WARM = 1000, args.dim, 2, 1, 128, 4
torch.manual_seed(0)
rng = np.random.default_rng(0)
N = args.steps * args.batch
lengths = np.clip(rng.lognormal(np.log(24), 0.6, N).astype(int), 4, MAX_LEN)
words = [f"w{i}" for i in range(VOCAB)]
texts = [" ".join(words[j] for j in rng.integers(0, VOCAB, n)) for n in lengths]  # the raw corpus
vocab = {w: i for i, w in enumerate(words)}
labels = (rng.random(N) < 0.5).astype(np.int64)


def tokenize(text: str) -> list[int]:
    """A word-level tokenizer with a little normalisation, as a hand-written one is."""
    out = []
    for w in text.lower().strip().split(" "):
        w = "".join(ch for ch in w if ch.isalnum())
        out.append(vocab.get(w, 0))
    return out


class Sentences(torch.utils.data.Dataset):
    def __init__(self, texts: list[str], labels: np.ndarray, tokenize_in_loader: bool) -> None:
        self.texts, self.labels, self.lazy = texts, labels, tokenize_in_loader
        self.ids = None if tokenize_in_loader else [tokenize(t) for t in texts]  # once, up front

    def __len__(self) -> int:
        return len(self.texts)

    def __getitem__(self, i: int) -> tuple[list[int], int]:
        if self.lazy:  # every epoch, in the loop's own process (num_workers=0)
            ids = tokenize(self.texts[i])
            for _ in range(60):  # the normalisation passes a real pipeline makes (lower, strip, unicode)
                ids = tokenize(" ".join(words[j] for j in ids))
            return ids, int(self.labels[i])
        return self.ids[i], int(self.labels[i])


def collate(items: list[tuple[list[int], int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Pad the batch to its own longest sentence (dynamic padding)."""
    longest = max(len(ids) for ids, _ in items)
    x = torch.zeros(len(items), longest, dtype=torch.long)
    for r, (ids, _) in enumerate(items):
        x[r, : len(ids)] = torch.tensor(ids)
    return x, torch.tensor([y for _, y in items])


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.fc1, self.fc2 = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, HEADS, C // HEADS).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v)
        x = self.ln1(x + self.proj(a.transpose(1, 2).reshape(B, T, C)))
        return self.ln2(x + self.fc2(F.gelu(self.fc1(x))))


class Classifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(VOCAB, D), nn.Embedding(MAX_LEN, D)
        self.blocks = nn.ModuleList([Block() for _ in range(LAYERS)])
        self.head = nn.Linear(D, 2)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        for b in self.blocks:
            x = b(x)
        return self.head(x[:, 0])


model = Classifier()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
loader = torch.utils.data.DataLoader(Sentences(texts, labels, args.tokenize_in_loader), batch_size=args.batch,
                                     shuffle=True, collate_fn=collate)
running, t0 = torch.zeros(()), 0.0
for i, (x, y) in enumerate(loader):
    if i == WARM:
        t0 = time.perf_counter()
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    running += loss.detach()
print(f"mean loss {(running / args.steps).item():.4f}")
print(f"step_ms={1e3 * (time.perf_counter() - t0) / (args.steps - WARM):.3f}")
