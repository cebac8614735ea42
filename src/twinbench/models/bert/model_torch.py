"""BERT encoder for sequence classification in PyTorch. Twin of ``model_jax.py``: same classes, same
attribute names (those of Hugging Face's ``BertForSequenceClassification``, without its ``bert.`` prefix),
same maths.

Token + position + segment embeddings, post-LayerNorm blocks (eps 1e-12), bidirectional self-attention
through ``F.scaled_dot_product_attention`` with a key padding mask, exact (erf) GELU, a tanh pooler over
the first token and a linear classifier. No dropout: the twins are deterministic, so they can be compared.

``cfg.mask_impl`` chooses how the padding mask reaches the attention (`--mask-impl`); all three give
the same result: ``where`` hands SDPA a boolean mask (a select inside the kernel), ``mul`` turns the 0/1 mask
into an additive bias by multiplication, ``cond`` asks once per forward pass (a Python ``if``, so one host
sync) whether any token is padding and, when none is, runs every layer without a mask.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.profiler import record_function
from torch.utils.checkpoint import checkpoint

from twinbench.config import ModelConfig
from twinbench.models import layers_torch
from twinbench.models.layers_torch import clip_grads, decay_mask
from twinbench.models.options import ModelOptions

TYPE_VOCAB = 2  # segment ids: 0 for the first text, 1 for the second of a pair
LN_EPS = 1e-12

__all__ = ["BERT", "clip_grads", "decay_mask", "loss_fn", "make_optimizer"]


def attention_bias(attention_mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """0 where a key is a real token, the dtype's most negative value where it is padding: by multiplying."""
    return (1.0 - attention_mask.to(dtype)) * torch.finfo(dtype).min


class SelfAttention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.heads = cfg.heads
        self.mask_impl = cfg.mask_impl
        self.query = nn.Linear(cfg.d_model, cfg.d_model)
        self.key = nn.Linear(cfg.d_model, cfg.d_model)
        self.value = nn.Linear(cfg.d_model, cfg.d_model)

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2)
                   for t in (self.query(x), self.key(x), self.value(x)))
        if attention_mask is None:  # cond, and no padding in this batch (BERT.forward asked once): no mask at all
            return F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(B, T, C)
        keep = attention_mask[:, None, None, :].bool()  # [B, 1, 1, T]: which keys each query may see
        if self.mask_impl == "mul":
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=attention_bias(keep, q.dtype))
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
        return y.transpose(1, 2).reshape(B, T, C)


class SelfOutput(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.dense = nn.Linear(cfg.d_model, cfg.d_model)
        self.LayerNorm = nn.LayerNorm(cfg.d_model, eps=LN_EPS)

    def forward(self, h: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dense(h) + x)


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.self = SelfAttention(cfg)
        self.output = SelfOutput(cfg)

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        return self.output(self.self(x, attention_mask), x)


class Intermediate(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.dense = nn.Linear(cfg.d_model, cfg.ff)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.dense(x))  # exact erf GELU, as BERT


class Output(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.dense = nn.Linear(cfg.ff, cfg.d_model)
        self.LayerNorm = nn.LayerNorm(cfg.d_model, eps=LN_EPS)

    def forward(self, h: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dense(h) + x)


class Layer(nn.Module):
    """One post-LayerNorm block: x = LN(x + attn(x)); x = LN(x + mlp(x))."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.attention = Attention(cfg)
        self.intermediate = Intermediate(cfg)
        self.output = Output(cfg)

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        with record_function("attn"):  # profiler scopes (twinbench explain), as the JAX twin's named_scope
            x = self.attention(x, attention_mask)
        with record_function("mlp"):
            return self.output(self.intermediate(x), x)


class Encoder(nn.Module):
    def __init__(self, cfg: ModelConfig, opts: ModelOptions = ModelOptions()):
        super().__init__()
        self.opts = opts
        self.layer = nn.ModuleList(Layer(cfg) for _ in range(cfg.layers))

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        for i, layer in enumerate(self.layer):
            with record_function(f"block{i}"):
                if self.opts.remat != "none":
                    x = checkpoint(layer, x, attention_mask, use_reentrant=False)
                else:
                    x = layer(x, attention_mask)
        return x


class Embeddings(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(cfg.vocab, cfg.d_model)
        self.position_embeddings = nn.Embedding(cfg.context, cfg.d_model)
        self.token_type_embeddings = nn.Embedding(TYPE_VOCAB, cfg.d_model)
        self.LayerNorm = nn.LayerNorm(cfg.d_model, eps=LN_EPS)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = self.word_embeddings(input_ids) + self.position_embeddings(pos)
        return self.LayerNorm(x + self.token_type_embeddings(token_type_ids))


class Pooler(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.dense = nn.Linear(cfg.d_model, cfg.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.dense(x[:, 0]))


class BERT(nn.Module):
    def __init__(self, cfg: ModelConfig, opts: ModelOptions = ModelOptions()):
        super().__init__()
        if opts.scan_layers or opts.remat not in ("none", "full"):
            raise ValueError(f"torch BERT: unsupported options {opts} (no layer scan; remat 'full' only)")
        self.cfg = cfg
        self.opts = opts
        self.embeddings = Embeddings(cfg)
        self.encoder = Encoder(cfg, opts)
        self.pooler = Pooler(cfg)
        self.classifier = nn.Linear(cfg.d_model, cfg.num_labels)
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        """BERT init: Normal(0, 0.02) for linear weights and embeddings, zero biases, LayerNorm 1/0."""
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear):
            nn.init.zeros_(module.bias)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Class logits [batch, num_labels]. ``attention_mask`` is 1 for real tokens, 0 for padding."""
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        mask: torch.Tensor | None = attention_mask
        if self.cfg.mask_impl == "cond" and bool(attention_mask.all()):  # one host sync per forward, not per layer
            mask = None  # no padding in this batch: every layer attends without a mask
        # bf16: autocast runs matmuls and attention in bf16; parameters and LayerNorm stay fp32.
        with torch.autocast(input_ids.device.type, torch.bfloat16, enabled=self.opts.compute_dtype == "bf16"):
            x = self.encoder(self.embeddings(input_ids, token_type_ids), mask)
            return self.classifier(self.pooler(x))


def loss_fn(model: nn.Module, x: tuple[torch.Tensor, ...], labels: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of the class logits, in float32. ``x`` = (input_ids, token_type_ids, attention_mask)."""
    logits = model(*x)
    return F.cross_entropy(logits.float(), labels.reshape(-1).long())


def make_optimizer(model: nn.Module, lr: float, weight_decay: float) -> torch.optim.Optimizer:
    """AdamW as BERT fine-tuning uses it (betas 0.9/0.999, eps 1e-6); the twin of ``model_jax.make_optimizer``."""
    return layers_torch.make_optimizer(model, lr, weight_decay, betas=(0.9, 0.999), eps=1e-6)
