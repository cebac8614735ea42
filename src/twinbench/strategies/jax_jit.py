"""JAX whole-step jit: forward, loss, gradient, clipping and the Optax update in ONE jitted function.

The model is split once into a static graph definition and its parameters as plain nested dicts (:class:`Split`);
the step is a pure function of (params, optimizer state, batch) and both states are donated, so XLA updates them
in place. No NNX graph traversal and no Python pytree flattening happens per step: that is what idiomatic, fast
JAX looks like.

:func:`make_train_step` is THE JAX train step: ``jit``, ``scan-steps``, ``scan-layers``, ``mesh-dp``,
``mesh-fsdp`` and ``pmap`` all run it, wrapped differently (``lax.scan`` over K batches, shardings, a
gradient ``pmean``). It takes ``loss_of(params, x, y)``, a pure function of a params pytree, so any model
plugs in: an NNX twin through :func:`nnx_loss`, or a plain JAX function and its params.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np
import optax
from flax import nnx

from twinbench.models import family as families
from twinbench.models.family import Family
from twinbench.models.weights import Canonical, canonical_to_jax, jax_to_canonical
from twinbench.spec import RunSpec
from twinbench.strategies.base import StepParts
from twinbench.strategies.modifiers import hook
from twinbench.strategies.options import model_options

LossOf = Callable[[Any, Any, Any], jax.Array]  # (params, x, y) -> scalar loss


def make_model(spec: RunSpec, weights: Canonical, family: Family | None = None) -> nnx.Module:
    """The family's JAX twin with the strategy's options (scan-layers, +remat, +bf16), holding ``weights``."""
    family = family or families.get(spec)
    options = model_options(spec)
    # Built abstract (shapes and dtypes only, nnx.eval_shape): ``weights`` replace every parameter, so a random
    # init would be thrown away, and on a CPU it costs a small XLA compile per parameter shape in every process.
    model = nnx.eval_shape(lambda: family.jax_model(spec.model, options, nnx.Rngs(spec.train.seed)))
    canonical_to_jax(model, weights)
    abstract = [jax.tree_util.keystr(p) for p, v in jax.tree_util.tree_leaves_with_path(nnx.state(model))
                if isinstance(v, jax.ShapeDtypeStruct)]
    if abstract:  # state the canonical weights do not cover (e.g. an RNG stream): it needs a real value
        raise ValueError(f"the {family.name} JAX twin holds state that is not a weight: {', '.join(abstract)}")
    return model


@dataclass(frozen=True)
class Split:
    """An NNX module taken apart for a pure step: its static graph and the structure of its parameter
    ``nnx.State``, beside the parameters themselves as plain nested dicts (``State.to_pure_dict``).

    The step's arguments are plain dicts and lists of arrays, which ``jax.jit`` flattens in C++ at every call; an
    ``nnx.State`` of ``nnx.Param`` objects is flattened and rebuilt in Python, a cost per leaf: with BERT-base's
    hundreds of parameter and optimizer-state leaves the call's host time doubles (the device idles for that host
    time when a loop reads a value back every step; benchmarks/RESULTS.md, "the plain-dict step"). The module is rebuilt only inside the traced function (:meth:`module`), once per compile."""

    graphdef: nnx.GraphDef
    statedef: Any  # the PyTreeDef of the nnx.State, whose leaves are in the pure dict's order

    @staticmethod
    def of(module: nnx.Module) -> tuple[Split, dict]:
        """(the split, the parameters as plain nested dicts)."""
        graphdef, state = nnx.split(module, nnx.Param)
        pure = state.to_pure_dict()
        paths = [_names(p) for p, _ in jax.tree_util.tree_flatten_with_path(state)[0]]
        if paths != [_names(p) for p, _ in jax.tree_util.tree_flatten_with_path(pure)[0]]:
            raise AssertionError("nnx.State and its pure dict flatten in different orders")  # a Flax change
        return Split(graphdef, jax.tree.structure(state)), pure

    def module(self, params: Any) -> nnx.Module:
        """The module holding ``params`` (plain dicts, as :meth:`of` gave them)."""
        return nnx.merge(self.graphdef, jax.tree.unflatten(self.statedef, jax.tree.leaves(params)))


def _names(path: tuple[Any, ...]) -> tuple[str, ...]:
    """A pytree path's dict keys and list indices (``nnx.State``'s path ends in its Variable's ``.value``
    attribute, which a pure dict's lacks)."""
    keys = (getattr(k, "key", getattr(k, "idx", None)) for k in path
            if not isinstance(k, jax.tree_util.GetAttrKey))
    return tuple(str(k) for k in keys)


def nnx_loss(family: Family, split: Split) -> LossOf:
    """``loss_of(params, x, y)`` of an NNX twin: the module rebuilt from ``split`` and ``params``."""

    def loss_of(params: Any, x: Any, y: Any) -> jax.Array:
        return family.jax_loss(split.module(params), x, y)

    return loss_of


def make_train_step(loss_of: LossOf, tx: optax.GradientTransformation,
                    reduce: Callable[[Any, jax.Array], tuple[Any, jax.Array]] | None = None,
                    spec: RunSpec | None = None):
    """The pure step (params, opt_state, x, y) -> (params, opt_state, loss).

    ``reduce(grads, loss) -> (grads, loss)`` runs between the gradient and the update (``pmap``: the
    ``lax.pmean`` over devices); shardings (``mesh-*``) and stacking (``scan-steps``) are applied around it.
    ``spec``: its modifiers' hooks wrap the gradient (``Modifier.jax_step``: (spec, value_and_grad) ->
    value_and_grad).
    """
    grad = jax.value_and_grad(loss_of)
    for target in spec.strategy.mods.jax_steps() if spec is not None else ():
        grad = hook(target)(spec, grad)

    def train_step(params, opt_state, x, y):
        loss, grads = grad(params, x, y)
        if reduce is not None:
            grads, loss = reduce(grads, loss)
        with jax.named_scope("optimizer"):  # the trace's optimizer phase (explain/)
            updates, opt_state = tx.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), opt_state, loss

    return train_step


def explain_parts(trainer: Any, loss_of: LossOf) -> StepParts:
    """forward alone and forward+backward as separate jitted functions of the trainer's params (explain/)."""
    forward = jax.jit(loss_of)
    forward_backward = jax.jit(jax.value_and_grad(loss_of))
    return StepParts(place=lambda x, y: (jax.device_put(x), jax.device_put(y)),
                     forward=lambda x, y: forward(trainer.params, x, y),
                     forward_backward=lambda x, y: forward_backward(trainer.params, x, y),
                     wait=jax.block_until_ready)


def explain_hlo(trainer: Any, x: Any, y: Any) -> str:
    """The compiled step's HLO text, whose op_name metadata the trace reader joins (explain/)."""
    return trainer.train_step.lower(trainer.params, trainer.opt_state, x, y).compile().as_text()


def scan_steps(train_step):
    """K steps in one call: ``lax.scan`` of ``train_step`` over batches stacked as [K, batch, seq]."""

    def multi_step(params, opt_state, xs, ys):
        def body(state, batch):
            params, opt_state, loss = train_step(*state, *batch)
            return (params, opt_state), loss

        (params, opt_state), losses = jax.lax.scan(body, (params, opt_state), (xs, ys))
        return params, opt_state, losses

    return multi_step


class JaxTrainer:
    """A params pytree, its optimizer state and the jitted :func:`make_train_step`: the base every JAX
    strategy but ``naive`` builds on. Subclasses change where the arrays live (:meth:`place`) and how the
    step is compiled (:meth:`compile`).
    """

    steps_per_call = 1

    def __init__(self, spec: RunSpec, weights: Canonical):
        self.spec = spec
        self.family = families.get(spec)
        self.tx = self.family.jax_optimizer(spec.train.lr, spec.train.weight_decay, flat=spec.strategy.optimizer_state == "flat")
        params, self.loss_of = self.init_model(weights)
        self.params, self.opt_state = self.place(params)
        self.train_step = self.compile(make_train_step(self.make_loss(), self.tx, self.reduce(), spec))

    # where the model comes from ----------------------------------------------------------------------------
    def init_model(self, weights: Canonical) -> tuple[Any, LossOf]:
        """The parameter pytree and ``loss_of(params, x, y)``: the family's NNX twin holding ``weights``
        (a user's model: torchax or the user's port, ``strategies/jax_user.py``)."""
        self.split, params = Split.of(make_model(self.spec, weights, self.family))
        return params, nnx_loss(self.family, self.split)

    def place_buffers(self, tree: Any) -> Any:
        """Constants of the step that are not trained (torchax's buffers) where the step runs."""
        return tree

    # where a strategy differs ------------------------------------------------------------------------------
    def place(self, params: Any) -> tuple[Any, Any]:
        """Initial (params, optimizer state) where the strategy keeps them (default: the one device)."""
        return params, self.tx.init(params)

    def make_loss(self) -> LossOf:
        """The loss the step differentiates (``mesh-fsdp``: parameters gathered first)."""
        return self.loss_of

    def host_params(self) -> Any:
        """The parameters as one whole copy (``weights``)."""
        return self.params

    def reduce(self) -> Callable[[Any, jax.Array], tuple[Any, jax.Array]] | None:
        return None

    def compile(self, step: Callable) -> Callable:
        donate = not self.spec.strategy.mods.nodonate
        if self.steps_per_call > 1:
            step = scan_steps(step)
        return jax.jit(step, donate_argnums=(0, 1) if donate else ())

    # the Trainer protocol ------------------------------------------------------------------------------
    def step(self, x: np.ndarray, y: np.ndarray) -> Any:
        self.params, self.opt_state, loss = self.train_step(self.params, self.opt_state, x, y)
        return loss

    def sync(self) -> None:
        jax.block_until_ready((self.params, self.opt_state))

    def explain_parts(self) -> StepParts:
        if self.steps_per_call > 1 or self.reduce() is not None:
            raise NotImplementedError(f"explain: no forward/backward parts for jax/{self.spec.strategy.name}")
        return explain_parts(self, self.make_loss())

    def explain_hlo(self, x: Any, y: Any) -> str:
        return explain_hlo(self, x, y)

    def predict(self, x: Any) -> np.ndarray:
        """Predicted classes of a host batch (classification), by a jitted forward pass."""
        if not hasattr(self, "_predict"):
            split = self.split
            self._predict = jax.jit(lambda params, x: split.module(params)(*x).argmax(-1))
        return np.asarray(self._predict(self.host_params(), x))

    def weights(self) -> Canonical:
        return jax_to_canonical(self.split.module(self.host_params()))


class JitTrainer(JaxTrainer):
    """``jit`` and ``scan-layers`` (the same step over a model whose blocks are scanned); ``+nodonate``
    keeps the old params and optimizer state alive, so XLA must allocate new buffers for the updated ones.
    ``steps_per_call`` > 1 (``scan-steps``) wraps the step in a ``lax.scan`` over K stacked batches.
    """


def build(spec: RunSpec, weights: Canonical) -> JitTrainer:
    return JitTrainer(spec, weights)
