"""Randomness in a user's forward: found by a probe forward, dropout set to 0 in place, the rest refused."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from twinbench.byo import randomness
from twinbench.byo.run import trajectory


def encoder() -> nn.Module:
    layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.1, batch_first=True)
    return nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)


def mean_loss(m: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return m(x).float().mean()


X = torch.ones(2, 5, 16)


def test_probe_sees_module_dropout_and_multihead_attention_dropout():
    found = randomness.probe(encoder(), mean_loss, X, None)
    assert ("layers.0.self_attn", "multi_head_attention_forward dropout_p=0.1") in found
    assert ("layers.1.dropout1", "dropout p=0.1") in found


def test_switch_off_zeroes_every_dropout_in_place_and_names_each():
    m = encoder()
    names = randomness.check(m, mean_loss, X, None, "enc.py:build")
    assert "layers.0.self_attn.dropout (MultiheadAttention dropout=0.1)" in names
    assert "layers.1.dropout2 (Dropout p=0.1)" in names and len(names) == 8
    assert isinstance(m.layers[0].dropout1, nn.Dropout) and m.layers[0].dropout1.p == 0.0  # still readable
    assert m.layers[0].self_attn.dropout == 0.0
    assert randomness.probe(m, mean_loss, X, None) == []
    torch.manual_seed(0)
    a = mean_loss(m, X, None)
    torch.manual_seed(1)
    assert mean_loss(m, X, None).item() == a.item()  # deterministic in train mode


class Noisy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x) + 0.01 * torch.randn_like(x)


class OwnDropout(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rate = 0.2  # not a name that says dropout: twinbench cannot know it is one

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.dropout(x, self.rate, self.training)


class Attn(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attention_dropout = 0.1  # Hugging Face's name: switched off

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q = x.view(2, 1, 5, 16)
        return F.scaled_dot_product_attention(q, q, q, dropout_p=self.attention_dropout if self.training else 0.0)


@pytest.mark.parametrize(("module", "message"), [
    (nn.Sequential(nn.Linear(16, 16), Noisy()), "torch.randn_like in module 1"),
    (nn.Sequential(OwnDropout()), "dropout p=0.2 in module 0"),
])
def test_randomness_that_cannot_be_switched_off_is_refused_naming_module_and_op(module, message):
    with pytest.raises(randomness.RandomnessError, match="cannot switch off") as e:
        randomness.check(module, mean_loss, X, None, "m.py:build")
    assert message in str(e.value) and "\n" not in str(e.value)


def test_attention_dropout_attribute_is_switched_off():
    m = nn.Sequential(Attn())
    assert randomness.check(m, mean_loss, X, None, "m.py:build") == ["0.attention_dropout (Attn attention_dropout=0.1)"]


def test_trajectory_parity_flags_a_run_past_the_tolerance():
    eager = [2.0, 1.5, 1.0]
    assert trajectory([2.0, 1.5, 1.0 + 1e-7], eager).ok
    bad = trajectory([2.0, 1.5, 1.01], eager)
    assert not bad.ok and bad.max_rel == pytest.approx(0.01) and bad.first_rel == 0.0
