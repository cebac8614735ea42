"""The step's program, read here without running it: a JAX strategy's unoptimized HLO (every backend's
starting point), or a torch strategy's aten ops traced on fake tensors (``torch_ops.py``)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from twinbench.predict.datasheets import DISPATCH_US_PER_ARRAY
from twinbench.predict.roofline import Op
from twinbench.spec import USER, RunSpec


@dataclass
class Program:
    """What the roofline needs of one step."""

    ops: list[Op]
    memory_bytes: tuple[float, float]  #: (lower, upper) bound of the peak bytes the step holds on one device
    grad_bytes: float            #: bytes of the gradients one data-parallel all-reduce moves
    n_params: int
    tokens: int                  #: tokens per step (batch x seq)
    source: str                  #: how the ops were read
    steps_per_call: int = 1      #: training steps the ops stand for (scan-steps: K)
    gpu_ops: list[Op] | None = None  #: the kernels as XLA:GPU/CPU fuse them, where that differs (``hlo.py``)
    arguments: int = 0           #: arrays the jitted step takes (its state's and the batch's): the host's dispatch

    def ops_for(self, platform: str) -> list[Op]:
        """The kernels on ``platform``: XLA:TPU's large fusions on a TPU, the smaller acyclic ones of XLA:GPU
        and XLA:CPU elsewhere (the CPU program of the ``small`` preset moves a little more outside its dots than
        the acyclic model says, and more than twice what the TPU's large fusions move)."""
        ops = self.gpu_ops if platform in ("gpu", "cpu") and self.gpu_ops is not None else self.ops
        if platform in DISPATCH_US_PER_ARRAY and self.arguments:
            ops = [*ops, dispatch_op(self.arguments, platform)]
        return ops


def dispatch_op(arguments: int, platform: str) -> Op:
    """The host's dispatch of a step synchronised each time: the chip waits while the jitted call hands over
    its argument arrays (``datasheets.DISPATCH_US_PER_ARRAY``)."""
    return Op("dispatch", "dispatch", kernels=0, label=f"host dispatch of {arguments} argument arrays",
              fixed_us=arguments * DISPATCH_US_PER_ARRAY[platform])


def trainer_and_batch(spec: RunSpec) -> tuple[Any, Any, Any]:
    """The strategy's trainer on the family's initial weights, and one batch (x, y) of the run's data, as the
    worker builds them (``worker.build``); the user's model (--model) gets its own batches."""
    from twinbench.data import tasks
    from twinbench.models import family
    from twinbench.strategies import registry

    fam = family.get(spec)
    trainer = registry.builder(spec)(spec, fam.init_weights(spec.model, spec.train.seed))
    k = getattr(trainer, "steps_per_call", 1) or 1
    if spec.model.family == USER:
        from twinbench.byo.run import UserRun

        data = UserRun(spec).run_data(k, trainer)
    else:
        data = tasks.run_data(spec, k)
    x, y = data.batches[0]
    return trainer, x, y


def traced_trainer(spec: RunSpec) -> tuple[Any, Any, Any, Any]:
    """(the strategy's trainer, its (params, optimizer state) as shapes, x, y) for ``spec``. The trainer is built
    under ``jax.eval_shape``: its parameters, their layouts and the optimizer's state are traced, never allocated
    (the weights themselves are the host's arrays), so a model is read in a fraction of the memory its training
    would hold; a strategy whose set-up needs concrete values is built as a run builds it. Only the trainer's
    step (and attributes such as ``steps_per_call``) may be used: its own state is the trace's."""
    import jax

    built: list[tuple[Any, Any, Any]] = []  # (trainer, x, y) as the last build made them

    def build() -> tuple[Any, Any]:
        built.append(trainer_and_batch(spec))
        trainer = built[-1][0]
        return trainer.params, trainer.opt_state

    try:
        state = jax.eval_shape(build)
    except Exception:  # a set-up that cannot be traced (a value read back, a library's own check): built
        # concretely, where a real error of the model or strategy is raised as a run would raise it
        built.append(trainer_and_batch(spec))
        trainer = built[-1][0]
        state = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), (trainer.params, trainer.opt_state))
    trainer, x, y = built[-1]
    return trainer, state, x, y


def jax_hlo(spec: RunSpec) -> tuple[str, Any, int]:
    """(the unoptimized HLO text of the strategy's train step, its (params, optimizer state) as shapes, the steps
    one call runs) for ``spec``, lowered only, from traced state (:func:`traced_trainer`)."""
    import warnings

    with warnings.catch_warnings():  # torchax's int64 -> int32 notice, once per tensor: the program is the same
        warnings.filterwarnings("ignore", message="Explicitly requested dtype int64", category=UserWarning)
        trainer, state, x, y = traced_trainer(spec)
        lowered = trainer.train_step.lower(*state, x, y)
    return lowered.as_text(dialect="hlo"), state, getattr(trainer, "steps_per_call", 1) or 1


def jax_program(spec: RunSpec) -> Program:
    """The JAX step's kernels, fused the way a TPU/GPU compiler would (``hlo.py``). A fused attention
    (``attention.fused_in``) is lowered as the einsum attention, then its ops replaced by the fused
    kernel's and its scores kept off the memory (``attention.py``)."""

    import jax

    from twinbench.models import family
    from twinbench.predict import attention, hlo

    fused = attention.fused_in(spec)
    m, t = spec.model, spec.train
    on_chip = (lambda ins: bool(ins.shapes) and attention.is_score_shape(ins.shapes[0][1], m.heads, t.seq, t.batch)) \
        if fused else None
    text, (params, opt_state), k = jax_hlo(spec.evolve(attention_impl="default") if fused else spec)
    ops, gpu_ops, memory = hlo.step_ops(text, on_chip)
    source = f"unoptimized HLO of the jitted step ({len(text.splitlines())} lines), fused by predict/hlo.py"
    if fused:
        shape = {"layers": m.layers, "batch": t.batch, "heads": m.heads, "seq": t.seq}
        causal = family.get(spec).causal
        # the TPU's kernels run splash (a GPU's, cuDNN's); each list is costed on its own platform
        ops, gpu_ops = (attention.fused_attention(o, **shape, head_dim=m.d_model // m.heads, causal=causal,
                                                  splash=tpu and spec.strategy.attention_impl == "splash")
                        for o, tpu in ((ops, True), (gpu_ops, False)))
        stats = attention.stats_bytes(**shape)
        memory = (memory[0] + stats, memory[1] + stats)
        source += f"; its einsum attention replaced by the {spec.strategy.attention_impl} kernel (predict/attention.py)"
    leaves = jax.tree_util.tree_leaves(params)
    n_params = sum(math.prod(x.shape) for x in leaves)
    grad_bytes = 4.0 * n_params  # fp32 master weights: fp32 gradients
    arguments = len(jax.tree_util.tree_leaves((params, opt_state))) + 2  # and the batch's (x, y)
    return Program(ops, memory, grad_bytes, n_params, t.batch * t.seq, source, k, gpu_ops, arguments)
