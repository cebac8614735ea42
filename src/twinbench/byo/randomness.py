"""Randomness in a user's forward: switched off where it can be, refused (one line) where it cannot.

Two steps, both in the preparation process and the first again in every run:

1. :func:`switch_off` sets ``p = 0`` on every ``nn.Dropout*`` module (the module stays, so code that reads
   ``self.dropout.p`` keeps working) and ``0.0`` on every float attribute whose name says dropout
   (``nn.MultiheadAttention.dropout``, Hugging Face's ``attention_dropout``, ``dropout_p``, ...), and returns
   the qualified name of each one it changed from a non-zero value.
2. :func:`probe` runs one forward and backward of ``loss_fn`` in train mode under a
   :class:`torch.overrides.TorchFunctionMode` that sees every call: dropout functions and attention with
   ``dropout_p > 0`` still active after step 1, and the draws twinbench cannot control (``torch.rand*``,
   ``randn*``, ``randint*``, ``randperm``, ``bernoulli``, ``multinomial``, ``normal``, in-place ``uniform_``
   ...). The first one found is reported with the module whose forward was running and the op.

A model that passes both computes the same function in every framework, so its trajectories can be compared
(the record's ``parity``).
"""

from __future__ import annotations

from typing import Any

#: Torch functions (by ``__name__``) that draw random numbers whatever their arguments.
RANDOM_OPS = frozenset({
    "rand", "rand_like", "randn", "randn_like", "randint", "randint_like", "randperm", "bernoulli",
    "multinomial", "normal", "poisson", "uniform_", "normal_", "bernoulli_", "exponential_", "geometric_",
    "log_normal_", "cauchy_", "random_", "rrelu", "rrelu_", "gumbel_softmax"})
#: Dropout functions: random only when ``training`` and ``p > 0``.
DROPOUT_OPS = frozenset({"dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout",
                         "native_dropout", "feature_dropout"})
#: Attention functions with a dropout argument.
ATTENTION_OPS = {"scaled_dot_product_attention": "dropout_p", "multi_head_attention_forward": "dropout_p"}
DROPOUT_ATTRS = ("dropout", "attention_dropout", "attn_dropout", "dropout_p", "attn_pdrop", "resid_pdrop",
                 "embd_pdrop", "dropout_prob", "attention_probs_dropout_prob", "hidden_dropout_prob",
                 "hidden_dropout", "activation_dropout")


class RandomnessError(ValueError):
    """Randomness in the forward that twinbench cannot switch off; the message is one line."""


def switch_off(module: Any) -> list[str]:
    """Dropout to zero in place (modules keep their type); the names of what was non-zero, in module order."""
    import torch

    changed: list[str] = []
    for name, m in module.named_modules():
        where = name or type(module).__name__
        if isinstance(m, torch.nn.modules.dropout._DropoutNd):
            if m.p:
                changed.append(f"{where} ({type(m).__name__} p={m.p:g})")
            m.p = 0.0
            continue
        for attr in DROPOUT_ATTRS:
            v = m.__dict__.get(attr)
            if isinstance(v, float) and not isinstance(v, bool) and v > 0:
                changed.append(f"{where}.{attr} ({type(m).__name__} {attr}={v:g})")
                setattr(m, attr, 0.0)
    return changed


def _arg(args: tuple, kwargs: dict, name: str, pos: int, default: Any) -> Any:
    if name in kwargs:
        return kwargs[name]
    return args[pos] if len(args) > pos else default


def random_call(func: Any, args: tuple, kwargs: dict) -> str | None:
    """What makes this call random (``"torch.rand"``, ``"dropout p=0.1"``), or None."""
    name = getattr(func, "__name__", "")
    if name not in RANDOM_OPS and name not in DROPOUT_OPS and name not in ATTENTION_OPS:
        return None
    if name in RANDOM_OPS:
        return f"torch.{name}"
    if name in DROPOUT_OPS:
        p = _arg(args, kwargs, "p", 1, 0.5)
        training = _arg(args, kwargs, "training", 2, True)
        return f"{name} p={p:g}" if training and p else None
    if name in ATTENTION_OPS:
        if name == "scaled_dot_product_attention":
            p = _arg(args, kwargs, "dropout_p", 4, 0.0)
            return f"scaled_dot_product_attention dropout_p={p:g}" if p else None
        p = _arg(args, kwargs, "dropout_p", 10, 0.0)
        training = _arg(args, kwargs, "training", 13, True)
        return f"multi_head_attention_forward dropout_p={p:g}" if training and p else None
    return None


def probe(module: Any, loss_fn: Any, x: Any, y: Any) -> list[tuple[str, str]]:
    """(module name, op) of each random call in one train-mode forward and backward of ``loss_fn``."""
    import torch
    from torch.overrides import TorchFunctionMode

    stack: list[str] = []
    names = {id(m): (n or type(module).__name__) for n, m in module.named_modules()}
    found: list[tuple[str, str]] = []

    class Watch(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
            kwargs = kwargs or {}
            what = random_call(func, args, kwargs)
            if what:
                found.append((stack[-1] if stack else "loss_fn", what))
            return func(*args, **kwargs)

    def pre(m: Any, _args: Any) -> None:
        stack.append(names.get(id(m), type(m).__name__))

    def post(m: Any, _args: Any, _out: Any) -> None:
        if stack:
            stack.pop()

    handles = [torch.nn.modules.module.register_module_forward_pre_hook(pre),
               torch.nn.modules.module.register_module_forward_hook(post)]
    was_training = module.training
    module.train()
    try:
        with Watch():
            loss = loss_fn(module, x, y)
            if isinstance(loss, torch.Tensor) and loss.requires_grad:
                loss.backward()
    finally:
        for h in handles:
            h.remove()
        module.zero_grad(set_to_none=True)
        module.train(was_training)
    return found


def check(module: Any, loss_fn: Any, x: Any, y: Any, ref: str) -> list[str]:
    """Switch dropout off, probe, and raise :class:`RandomnessError` naming the first random call left."""
    changed = switch_off(module)
    found = probe(module, loss_fn, x, y)
    if found:
        where, what = found[0]
        more = f" (and {len(found) - 1} more random call(s))" if len(found) > 1 else ""
        raise RandomnessError(f"--model {ref}: the forward draws random numbers twinbench cannot switch off: "
                              f"{what} in module {where}{more}; make it deterministic in train mode (use "
                              "nn.Dropout modules for dropout)")
    return changed
