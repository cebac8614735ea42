"""``torchax``: a PyTorch module's training step as one JAX program, for the twins and a user's module alike.

torchax runs torch code on JAX arrays. ``torchax.extract_jax`` of a small wrapper whose ``forward(x, y)`` is the
family's loss (``Family.torch_loss``: a twin's ``loss_fn``, or the user's) gives the module's state (parameters
and buffers, by torch name) and a pure JAX function of it. The step around that function is the twins' JAX step
(:class:`~twinbench.strategies.jax_jit.JaxTrainer`): one ``jax.jit`` of ``value_and_grad`` and the family's
Optax chain (global-norm clipping at 1.0, AdamW with the family's betas, eps and the rank >= 2 decay mask, here
on the torch-named parameters), parameters and optimizer state donated (``+nodonate`` keeps them). What runs is
PyTorch code compiled by XLA, so the run is a JAX run: JAX's device, measured matmul peak (MFU), memory,
compile events and profiler; the record's ``versions`` add torch and torchax.

- ``+bf16``: torchax's autocast (``torchax.amp.autocast``), whose policy is ``torch.autocast``'s: matmuls,
  linear layers and attention in bf16, the loss and the rest in fp32; parameters and optimizer state stay fp32
  (the torch twin's ``torch.autocast``, which torchax does not see: the module is built fp32 and cast here).
- ``+remat``: each block the family names (``Family.torch_blocks``) is called inside ``jax.checkpoint``, its
  parameters passed in explicitly (``torch.utils.checkpoint`` has no effect here: torch autograd never runs,
  JAX differentiates the traced program).
- ``+fused-loss``: ``F.cross_entropy`` lowered as the JAX twins' loss (``strategies/torchax_loss.py``: fused
  fp32 reductions over the logits) instead of torchax's own ``log_softmax`` + ``nll_loss``; the default is what a
  plain torchax user gets, so both are measurable.
- an operator torchax has no lowering for ends the build with :class:`TorchaxUnsupported`: one line naming the
  operator and the layer (module path) that called it.

torchax is imported through :func:`twinbench.strategies.torchax_compat.import_torchax`, in this (JAX) worker
process only: it changes global torch settings, so a PyTorch measurement process never imports it.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator
from typing import Any

import jax
import numpy as np

from twinbench.models.options import ModelOptions
from twinbench.spec import RunSpec
from twinbench.strategies.jax_jit import JaxTrainer, LossOf
from twinbench.strategies.jax_mesh import MeshTrainer
from twinbench.strategies.options import compute_dtype
from twinbench.strategies.torchax_compat import import_torchax, lowered, traced_as_compiled
from twinbench.strategies.torchax_loss import cross_entropy_lowered


class TorchaxUnsupported(Exception):
    """An operator of the torch module that torchax cannot lower to JAX (one line: the op and the layer)."""


def with_loss(module: Any, loss_fn: Callable[[Any, Any, Any], Any]) -> Any:
    """A module whose ``forward(x, y)`` is ``loss_fn(module, x, y)`` as a 0-d float tensor, holding ``module`` as
    ``.model``: what torchax extracts (its state is named ``model.<torch name>``)."""
    import torch

    class WithLoss(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = module

        def forward(self, x: Any, y: Any) -> Any:
            return loss_fn(self.model, x, y).float().reshape(())

    return WithLoss()


class LayerStack:
    """The module path being called, kept by forward hooks on every submodule while the program is traced:
    where an operator torchax lacks was met."""

    def __init__(self, root: Any, prefix: str = "model.") -> None:
        self.path: list[str] = []
        for name, sub in root.named_modules():
            if name:
                shown = name.removeprefix(prefix) if name != prefix.rstrip(".") else "(model)"
                sub.register_forward_pre_hook(self.enter(f"{shown} ({type(sub).__name__})"))
                sub.register_forward_hook(self.leave)

    def enter(self, where: str) -> Callable[..., None]:
        def hook(*_: Any) -> None:
            self.path.append(where)

        return hook

    def leave(self, *_: Any) -> None:
        if self.path:
            self.path.pop()

    @contextlib.contextmanager
    def watch(self) -> Iterator[None]:
        """Translate torchax's ``OperatorNotFound`` raised inside into :class:`TorchaxUnsupported`."""
        from torchax.tensor import OperatorNotFound

        self.path.clear()
        try:
            yield
        except OperatorNotFound as e:
            found = re.search(r"name (\S+) has no lowering", str(e))
            op = found.group(1) if found else str(e)
            where = self.path[-1] if self.path else "the loss"
            raise TorchaxUnsupported(f"torchax {torchax_version()} has no JAX lowering for the torch operator "
                                     f"{op}, called in {where}: this model cannot run under torchax (run it "
                                     f"with torch:eager or torch:compile)") from None


def torchax_version() -> str:
    from importlib.metadata import version

    return version("torchax")


def remat_block(block: Any, env: Any) -> None:
    """``+remat``: ``block``'s forward runs inside ``jax.checkpoint``, its parameters and buffers and the tensor
    arguments passed in explicitly (the rest, e.g. a ``None`` mask, is closed over); XLA recomputes the block's
    activations in the backward pass instead of keeping them."""
    import torch
    from torch.nn.utils import stateless
    from torch.utils import _pytree as pytree

    forward = block.forward

    def remat_forward(*args: Any, **kwargs: Any) -> Any:
        state = {**dict(block.named_parameters()), **dict(block.named_buffers())}
        leaves, spec = pytree.tree_flatten((args, kwargs))
        where = [i for i, v in enumerate(leaves) if isinstance(v, torch.Tensor)]

        def pure(state_j: Any, tensors_j: Any) -> Any:
            st, tensors = env.j2t_iso((state_j, tensors_j))
            full = list(leaves)
            for i, t in zip(where, tensors, strict=True):
                full[i] = t
            a, kw = pytree.tree_unflatten(full, spec)
            with env, stateless._reparametrize_module(block, st):
                return env.t2j_iso(forward(*a, **kw))

        out = jax.checkpoint(pure)(env.t2j_iso(state), env.t2j_iso([leaves[i] for i in where]))
        return env.j2t_iso(out)

    block.forward = remat_forward


def sdpa_as(impl: str, seq_minor: bool = False) -> Callable[..., Any]:
    """``F.scaled_dot_product_attention`` (``[B, H, T, D]`` torch layout) as a JAX function running the twins'
    attention ``impl``: a boolean ``attn_mask`` is the mask (True: attend), a float one an additive bias;
    ``scale`` folds into the queries; with ``enable_gqa`` the key/value heads go to the attention grouped
    (:func:`twinbench.models.layers_jax.attention` repeats them for kernels that do not take groups). Dropout is refused
    (the twins train without it, and the JAX attentions take none). ``seq_minor``: the splash kernel reads q, k, v
    sequence-minor (``--splash-layout seq-minor``; torch's q, k, v come through a transpose, so "auto" is not)."""
    import jax.numpy as jnp

    from twinbench.models.layers_jax import attention

    def sdpa(query: Any, key: Any, value: Any, attn_mask: Any = None, dropout_p: float = 0.0,
             is_causal: bool = False, scale: float | None = None, enable_gqa: bool = False) -> Any:
        if dropout_p:
            raise TorchaxUnsupported(f"--attention-impl {impl} under torchax: scaled_dot_product_attention with "
                                     f"dropout_p={dropout_p} has no dropout in the JAX attentions; use "
                                     "--attention-impl default")
        q, k, v = query, key, value  # [B, H, T, D]; with enable_gqa k and v may have fewer heads (attention() groups)
        if k.shape[1] != q.shape[1] and not enable_gqa:
            raise TorchaxUnsupported(f"scaled_dot_product_attention: {k.shape[1]} key heads for {q.shape[1]} query "
                                     "heads without enable_gqa=True (torch refuses this too)")
        if scale is not None:
            q = q * jnp.asarray(scale * q.shape[-1] ** 0.5, q.dtype)
        masks: dict[str, jax.Array | bool] = {"is_causal": True} if is_causal else {}
        if attn_mask is not None:
            masks["mask" if attn_mask.dtype == jnp.bool_ else "bias"] = attn_mask
        return attention(q, k, v, impl, layout_heads_first=True, seq_minor=seq_minor, **masks)

    return sdpa


@contextlib.contextmanager
def attention_lowered_as(env: Any, impl: str, seq_minor: bool = False) -> Iterator[None]:
    """While active, torchax lowers ``F.scaled_dot_product_attention`` to :func:`sdpa_as` ``(impl)`` (nothing
    changes for ``default``); torchax's own lowering is put back on exit."""
    if impl == "default":
        yield
        return
    import torch.nn.functional as F

    with lowered(env, F.scaled_dot_product_attention, sdpa_as(impl, seq_minor), is_jax_function=True):
        yield


def module_options(spec: RunSpec) -> ModelOptions:
    """The torch module's own options: fp32 and no checkpointing (torchax applies ``+bf16`` and ``+remat``); the
    attention and the splash layout its SDPA is lowered to."""
    return ModelOptions(attention_impl=spec.strategy.attention_impl, splash_layout=spec.strategy.splash_layout)


class TorchaxModel:
    """The trainer's model is the family's torch module (a twin's ``model_torch.py``, or the user's module) run by
    torchax; the rest of the step is the JAX trainer it is mixed into."""

    spec: RunSpec
    family: Any

    def init_model(self, weights: dict[str, np.ndarray]) -> tuple[Any, LossOf]:
        import torch

        torchax = import_torchax()
        env = torchax.default_env()
        opts = module_options(self.spec)
        self.module = self.family.torch_model(self.spec.model, opts)
        self.family.torch_load(self.module, weights)
        self.module.train()
        wrapper = with_loss(self.module, self.family.torch_loss)
        self.layers = LayerStack(wrapper)
        if self.spec.strategy.mods.remat:
            for block in self.family.torch_blocks(self.module):
                remat_block(block, env)
        states, fn = torchax.extract_jax(wrapper)
        trained = {n for n, _ in wrapper.named_parameters()}
        params = {k: v for k, v in states.items() if k in trained}
        buffers = self.place_buffers({k: v for k, v in states.items() if k not in trained})  # type: ignore[attr-defined]
        bf16 = compute_dtype(self.spec) == "bf16"
        self.autocast = (lambda: torchax.amp.autocast("jax", torch.bfloat16, env)) if bf16 else contextlib.nullcontext
        self.buffers = buffers
        seq_minor = opts.splash_seq_minor(written_heads_first=False)  # torch's q, k, v come through a transpose
        self.attention = lambda: attention_lowered_as(env, opts.attention_impl, seq_minor)
        self.loss_lowering = lambda: cross_entropy_lowered(env, self.spec.strategy.mods.fused_loss)

        def loss_of(params: dict[str, jax.Array], x: Any, y: Any) -> Any:
            with traced_as_compiled(), self.layers.watch(), self.autocast(), self.attention(), self.loss_lowering():
                return fn({**params, **buffers}, (x, y))

        return params, loss_of

    def weights(self) -> dict[str, np.ndarray]:
        """The trained parameters put back into the torch module, in the family's layout (a twin: canonical;
        a user's module: its ``state_dict``, tied weights under each name, buffers as built)."""
        import torch

        host = {k.removeprefix("model."): torch.from_numpy(np.array(v)) for k, v in self.host_params().items()}  # type: ignore[attr-defined]
        self.module.load_state_dict(host, strict=False)
        return self.family.torch_weights(self.module)

    def predict(self, x: Any) -> np.ndarray:
        """Predicted classes of a host batch (classification): the module's forward under torchax, jitted."""
        if not hasattr(self, "_predict"):
            torchax = import_torchax()
            states, forward = torchax.extract_jax(self.module)
            names = {n for n, _ in self.module.named_parameters()}
            buffers = {k: v for k, v in states.items() if k not in names}

            def classes(params: Any, x: Any) -> Any:
                with traced_as_compiled(), self.autocast(), self.attention():
                    own = {k.removeprefix("model."): v for k, v in params.items()}
                    return forward({**own, **buffers}, tuple(x)).argmax(-1)

            self._predict = jax.jit(classes)
        x = x if isinstance(x, (tuple, list)) else (x,)
        return np.asarray(self._predict(self.host_params(), x))  # type: ignore[attr-defined]


class TorchaxTrainer(TorchaxModel, JaxTrainer):
    """``torchax``: the twins' jit step over the family's torch module."""


class TorchaxMeshTrainer(TorchaxModel, MeshTrainer):
    """``torchax-mesh-dp`` / ``-fsdp``: the twins' mesh step over the family's torch module."""


def build(spec: RunSpec, weights: dict[str, np.ndarray]) -> TorchaxTrainer:
    return TorchaxTrainer(spec, weights)
