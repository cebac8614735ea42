"""The programs predict reads: a JAX step's HLO and a torch step's aten ops, on the tiny preset (no step runs)."""

from __future__ import annotations

import pytest

from twinbench.plan import build_specs
from twinbench.predict import program, torch_ops
from twinbench.predict.attention import fused_attention, is_score_op


def _spec(framework: str, strategy: str, **overrides: int):
    return build_specs("tiny", framework, strategy, overrides)[0]


def _model_flops(spec, attention: bool = True) -> float:
    """The matmul FLOPs of one step of the tiny GPT: 6 x params-in-matmuls x tokens (+ attention's)."""
    m, t = spec.model, spec.train
    tokens = t.batch * t.seq
    per_layer = 4 * m.d_model * m.d_model + 2 * 4 * m.d_model * m.d_model  # qkv + proj, two MLP matmuls
    dense = 6 * tokens * (m.layers * per_layer + m.d_model * m.vocab)
    scores = 3 * 2 * 2 * t.batch * t.seq * t.seq * m.d_model * m.layers  # QK^T and PV, fwd + 2x bwd
    return dense + scores * attention


def test_jax_step_matmul_flops_match_the_model_and_attention_can_be_fused():
    spec = _spec("jax", "jit+bf16")
    prog = program.jax_program(spec)
    flops = sum(op.flops * op.count for op in prog.ops if op.kind == "matmul")
    assert flops == pytest.approx(_model_flops(spec), rel=0.02)
    assert all(op.dtype == "bf16" for op in prog.ops if op.kind == "matmul" and op.flops > 1e6)
    low, high = prog.memory_bytes
    assert prog.n_params > 0 and 12 * prog.n_params < low <= high  # params + Adam state at least
    seq = spec.train.seq
    assert any(is_score_op(op, seq, spec.model.heads) for op in prog.ops)
    m = spec.model
    fused = fused_attention(prog.ops, layers=m.layers, batch=spec.train.batch, heads=m.heads, seq=seq,
                            head_dim=m.d_model // m.heads, causal=True)
    assert not any(is_score_op(op, seq, m.heads) for op in fused)
    (att,) = [op for op in fused if op.kind == "attention"]
    assert att.count == m.layers


def test_fusing_attention_keeps_every_projection_where_the_width_is_the_sequence_length():
    """Llama-300M's d_model equals its sequence (1024): its [batch, seq, d_model] projections are no scores."""
    spec = _spec("jax", "jit+bf16", d_model=32, seq=32)
    prog = program.jax_program(spec)
    m, t = spec.model, spec.train
    fused = fused_attention(prog.ops, layers=m.layers, batch=t.batch, heads=m.heads, seq=t.seq,
                            head_dim=m.d_model // m.heads, causal=True)
    flops = sum(op.flops * op.count for op in fused if op.kind == "matmul")
    assert flops == pytest.approx(_model_flops(spec, attention=False), rel=0.02)


def test_torch_step_traced_on_fake_tensors_eager_and_fused():
    spec = _spec("torch", "eager")
    trace, _ = torch_ops.trace_step(spec)
    eager = torch_ops.eager_ops(trace, spec)
    fused = torch_ops.fuse_runs(trace, spec)
    mm = sum(op.flops for op in eager if op.kind == "matmul")
    assert mm == pytest.approx(_model_flops(spec) - 3 * 2 * 2 * spec.train.batch * spec.train.seq ** 2
                               * spec.model.d_model * spec.model.layers, rel=0.05)  # SDPA is its own kernel
    assert sum(op.flops for op in fused if op.kind == "matmul") == mm
    assert len(fused) < len(eager)  # element-wise runs became kernels
    assert sum(op.bytes for op in fused) < sum(op.bytes for op in eager)
    assert any(op.kind == "attention" for op in eager)


@pytest.mark.parametrize("strategy", ["jit+bf16", "scan-steps"])
def test_the_step_is_lowered_from_traced_state_nothing_of_its_size_allocated(strategy):
    """predict reads a model it could not train here: the parameters and optimizer state are traced (shapes), and
    no device array of a parameter's shape is alive after the lowering (the embedding's is the largest)."""
    import jax

    spec = _spec("jax", strategy, vocab=4099)  # an embedding shape no other array of the test process has
    text, state, k = program.jax_hlo(spec)
    leaves = jax.tree_util.tree_leaves(state)
    assert leaves and all(isinstance(x, jax.ShapeDtypeStruct) for x in leaves)
    embedding = [x.shape for x in leaves if 4099 in x.shape]
    assert embedding and not [a for a in jax.live_arrays() if a.shape in embedding]
    assert "4099" in text and k >= 1


def test_a_set_up_that_reads_a_value_back_is_built_concretely(monkeypatch):
    """A trainer whose set-up needs a concrete value (a norm read back) cannot be traced: it is built as a run builds
    it, and the step is lowered from its state's shapes all the same."""
    import jax

    real, calls = program.trainer_and_batch, []

    def reads_back(spec):
        trainer, x, y = real(spec)
        calls.append(float(sum(leaf.sum() for leaf in jax.tree.leaves(trainer.params))))  # needs values
        return trainer, x, y

    monkeypatch.setattr(program, "trainer_and_batch", reads_back)
    text, state, k = program.jax_hlo(_spec("jax", "jit+bf16"))
    assert len(calls) == 1  # the traced build failed before its read; the concrete one read once
    assert all(isinstance(x, jax.ShapeDtypeStruct) for x in jax.tree.leaves(state)) and "ENTRY" in text and k == 1


def test_fused_attention_program_keeps_no_scores_in_memory():
    """--attention-impl cudnn (splash likewise): lowered as the einsum, its score ops replaced by one kernel per
    layer, and its [batch, heads, seq, seq] tensors left out of the memory, the logsumexp kept instead."""
    from twinbench.predict import attention, hlo

    einsum = _spec("jax", "jit+bf16", heads=8, batch=32)  # scores 4x an activation: they make the peak
    fused = build_specs("tiny", "jax", "jit+bf16", {"heads": 8, "batch": 32}, attention_impl="cudnn")[0]
    m, t = fused.model, fused.train
    text, _, _ = program.jax_hlo(einsum)
    flat = hlo.flatten(hlo.parse(text))
    scores = [i for i in flat.instrs if i.shapes and attention.is_score_shape(i.shapes[0][1], m.heads, t.seq)]
    assert scores  # the einsum's scores are in its program
    prog = program.jax_program(fused)
    assert [op.count for op in prog.ops if op.kind == "attention"] == [m.layers]
    assert not any(is_score_op(op, t.seq, m.heads) for op in [*prog.ops, *prog.gpu_ops])
    stats = attention.stats_bytes(layers=m.layers, batch=t.batch, heads=m.heads, seq=t.seq)
    on_chip = {i.name for i in scores}
    for acyclic, bound in ((False, prog.memory_bytes[0]), (True, prog.memory_bytes[1])):
        expected = hlo.materialized_peak(flat, acyclic, on_chip=lambda ins: ins.name in on_chip) + stats
        assert bound == pytest.approx(expected)
    assert prog.memory_bytes[1] < hlo.materialized_peak(flat, True)  # scores were live at the upper bound's peak


def test_llama_300m_does_not_fit_a_v5e_with_einsum_attention_and_fits_with_splash(monkeypatch):
    """The chip's own verdicts, 8 x 1024 bf16 on a TPU v5e: the einsum attention was refused ("HLO temporaries
    16.52G > 15.75G"), the splash step ran in 10.91 GiB (its compiled program). One lowering serves both."""
    from twinbench.predict import command

    lowered: dict = {}
    real = program.jax_hlo
    monkeypatch.setattr(program, "jax_hlo", lambda spec: lowered.get("x") or lowered.setdefault("x", real(spec)))
    specs = [build_specs("llama-300m", "jax", "jit+bf16", {"batch": 8, "seq": 1024}, attention_impl=impl)[0]
             for impl in ("default", "splash")]
    einsum, splash = command.run(specs, "tpu-v5e")[0]
    assert einsum.fits == "no"
    assert splash.fits == "yes" and splash.memory_bytes < einsum.memory_range[0]


def test_the_fused_attention_is_predicted_where_the_step_runs_it():
    from twinbench.predict.attention import fused_in

    def spec(framework: str, strategy: str):
        return build_specs("tiny", framework, strategy, {}, attention_impl="cudnn")[0]

    assert fused_in(spec("jax", "jit+bf16"))
    assert fused_in(spec("jax", "torchax+bf16"))  # torchax lowers torch's SDPA to the kernel asked for
    assert not fused_in(spec("torch", "eager"))  # torch's SDPA picks its own kernel
    assert not fused_in(_spec("jax", "jit+bf16"))  # the default (einsum) attention


def test_scores_with_batch_and_heads_merged_are_the_attentions():
    """torch's batched matmul under torchax writes the scores as [batch * heads, seq, seq] (Llama's, after its
    key/value heads are repeated): a fused kernel replaces those too, and a [batch, seq, d] activation whose
    width is the sequence length is still no score."""
    from twinbench.predict.attention import is_score_shape
    from twinbench.predict.roofline import Op

    merged = Op("dot", "matmul", label="matmul bf16[128,1024,1024]xbf16[128,1024,64] -> bf16[128,1024,64]")
    activation = Op("dot", "matmul", label="matmul bf16[8,1024,1024]xbf16[2816,1024] -> bf16[8,1024,2816]")
    assert is_score_op(merged, 1024, 16, batch=8) and not is_score_op(merged, 1024, 16)
    assert not is_score_op(activation, 1024, 16, batch=8)
    assert is_score_shape((128, 1024, 1024), 16, 1024, batch=8) and not is_score_shape((8, 1024, 1024), 16, 1024, 8)
    assert len(fused_attention([merged, activation], layers=1, batch=8, heads=16, seq=1024, head_dim=64,
                               causal=True)) == 2  # the score product replaced by the kernel, the projection kept


def test_a_predictions_memory_range_is_lower_then_upper():
    from twinbench.predict import command

    pred = command.Prediction(_spec("jax", "jit"), None, None, (16.0, 11.0), 1, 1, 1.0)  # type: ignore[arg-type]
    assert pred.memory_range == (11.0, 16.0)


def test_an_op_that_reads_the_scores_into_a_smaller_tensor_is_the_attentions():
    """A softmax's row sums read the [batch, heads, seq, seq] scores and write [batch, heads, seq]: the fused
    kernel replaces them too (their label names only what they write)."""
    from twinbench.predict import attention, hlo

    text = """HloModule rowsum

add_f32 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main {
  q = f32[2,4,8,16]{3,2,1,0} parameter(0)
  k = f32[2,4,8,16]{3,2,1,0} parameter(1)
  s = f32[2,4,8,8]{3,2,1,0} dot(q, k), lhs_batch_dims={0,1}, lhs_contracting_dims={3}, rhs_batch_dims={0,1}, rhs_contracting_dims={3}
  zero = f32[] constant(0)
  r = f32[2,4,8]{2,1,0} reduce(s, zero), dimensions={3}, to_apply=add_f32
  w = f32[2,4,8]{2,1,0} parameter(2)
  ROOT m = f32[2,4,8]{2,1,0} multiply(r, w)
}
"""
    flat = hlo.flatten(hlo.parse(text))

    def on_chip(ins):
        return bool(ins.shapes) and attention.is_score_shape(ins.shapes[0][1], 4, 8, 2)

    ops = hlo.fused_ops(flat, on_chip=on_chip)
    (rowsum,) = [op for op in ops if "reduce" in op.label]
    assert "[2,4,8,8]" not in rowsum.label and rowsum.scores  # named by what it writes, marked by what it reads
    assert not any(op.scores for op in hlo.fused_ops(flat))  # nothing marked without a tensor kept on chip
    fused = fused_attention(ops, layers=1, batch=2, heads=4, seq=8, head_dim=16, causal=False)
    # the scores' product and their row sums replaced; the multiply of the sums (it reads no scores) kept
    assert sorted(op.kind for op in fused) == ["attention", "fused"]
    assert [op.label for op in fused if op.kind == "fused"] == ["fused multiply f32[2,4,8]"]


def test_a_point_longer_than_its_presets_context_is_predicted_at_its_own_length(monkeypatch):
    """A chip point measured with ``--context`` raised to its sequence (llama-300m at 2048 tokens) is predicted with
    that context, not refused as a sequence beyond the preset's positions."""
    from twinbench.models.family import presets
    from twinbench.predict import calibration, command

    seen = []
    monkeypatch.setattr(command, "predict_one", lambda spec, *a, **k: seen.append(spec) or "prediction")
    context = presets()["tiny"][0].context
    point = calibration.Point("here", "jax", "jit", "tiny", 2, 2 * context, 1.0)
    assert command.predicted(point, {}, {"jax/fp32/0": object()}) == "prediction"
    assert seen[0].train.seq == seen[0].model.context == 2 * context
