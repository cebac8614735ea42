"""A category follows the model's operation in both frameworks: JAX's attention products (the score and value
einsums, forward and backward) are attention, as torch's SDPA and its backward are, not matmul."""

from __future__ import annotations

import pytest

from tests.explain.typed import plain, side
from twinbench.explain import hlo

HLO = """
ENTRY %main (p0: f32[8,16,64,64]) -> f32[8,64,16,64] {
  %dot.1 = f32[8,16,64,64]{3,2,1,0} dot(%a, %b), lhs_batch_dims={0,2}, metadata={op_name="jit(train_step)/transpose(jvp(block1))/attn/bqhd,bkhd->bhqk/dot_general"}
  %dot.2 = f32[8,16,64,64]{3,2,1,0} dot(%p, %v), metadata={op_name="jit(train_step)/jvp(block1)/attn/bhqk,bkhd->bqhd/dot_general"}
  %dot.3 = f32[512,192]{1,0} dot(%x, %w), metadata={op_name="jit(train_step)/transpose(jvp(block1))/attn/dot_general"}
  %transpose.4 = f32[8,64,16,64]{3,2,1,0} transpose(%dot.2), dimensions={0,2,1,3}, metadata={op_name="jit(train_step)/transpose(jvp(block1))/attn/bhqk,bkhd->bqhd/transpose"}
  ROOT %fusion.5 = f32[8,64,16,64]{3,2,1,0} fusion(%dot.1), kind=kOutput, calls=%fused_dot, metadata={op_name="jit(train_step)/transpose(jvp(block0))/attn/bqhd,bkhd->bhqk/dot_general"}
}

%fused_dot (q: f32[8,16,64,64]) -> f32[8,64,16,64] {
  ROOT %dot.9 = f32[8,64,16,64]{3,2,1,0} dot(%q, %q), metadata={op_name="jit(train_step)/transpose(jvp(block0))/attn/bqhd,bkhd->bhqk/dot_general"}
}
"""


def test_jax_attention_products_are_attention_and_projections_matmul() -> None:
    instrs = hlo.parse(HLO)
    assert hlo.category(instrs["dot.1"]) == "attention"  # the backward of the score product
    assert hlo.category(instrs["dot.2"]) == "attention"  # the forward value product
    assert hlo.category(instrs["transpose.4"]) == "attention"  # its layout change, as inside torch's SDPA
    assert hlo.category(instrs["fusion.5"]) == "attention"  # a fusion of the backward score product
    assert hlo.category(instrs["dot.3"]) == "matmul"  # the q/k/v projection stays a matmul
    assert hlo.phase(instrs["dot.1"].op_name) == "backward"


def test_a_row_larger_than_the_gap_names_what_offsets_it() -> None:
    from twinbench.explain import gap

    a = {"run": "jax/jit", "step_ms": 100.0, "trace": {"forward": 40.0, "backward": 60.0},
         "cells": {"forward": {"matmul": 40.0}, "backward": {"attention": 0.0, "matmul": 60.0}}, "scopes": {}}
    b = {"run": "torch/eager", "step_ms": 104.0, "trace": {"forward": 31.0, "backward": 73.0},
         "cells": {"forward": {"matmul": 31.0}, "backward": {"attention": 13.0, "matmul": 60.0}}, "scopes": {}}
    text = gap.sentence(side(a), side(b), gap.rows(side(a), side(b)))
    assert "325% backward / attention" in text
    assert "other way: forward / matmul -9.0 ms (jax/jit slower there)" in text


def _side(run: str, step: float, cells: dict, tput: dict) -> dict:
    """One explained run; a backward with no forward given gets one (half its time, half its matmul FLOPs),
    so that its phases pass explain's check that they are a training step's (causes.phase_check)."""
    trace = {p: sum(c.values()) for p, c in cells.items()}
    if "backward" in trace and "forward" not in trace:
        trace["forward"] = trace["backward"] / 2
    bw = (tput.get("backward", {}).get("matmul") or {}).get("flops")
    if bw and not (tput.get("forward", {}).get("matmul") or {}).get("flops"):
        tput = {**tput, "forward": {**tput.get("forward", {}), "matmul": {"flops": bw / 2}}}
    return {"run": run, "step_ms": step, "trace": trace, "cells": cells, "scopes": {}, "throughput": tput,
            "peak": {"tflops": 1.0}, "compiler": "XLA" if run.startswith("jax") else ""}  # as a JAX trace's reader says


def test_gap_rows_say_framework_or_implementation() -> None:
    from twinbench.explain import gap

    # backward matmul: the same FLOPs, XLA at 50% of its peak, torch at 80% -> the framework's
    # forward element-wise: jax/jit moves 3x the bytes -> the implementation's
    a = _side("torch/eager", 100.0, {"backward": {"matmul": 50.0}, "forward": {"element-wise": 5.0}},
              {"backward": {"matmul": {"flops": 4e10, "raw_ms": 50.0, "tflops": 0.8, "peak_share": 0.8}},
               "forward": {"element-wise": {"bytes": 1e9, "raw_ms": 5.0, "gbps": 200.0}}})
    b = _side("jax/jit", 125.0, {"backward": {"matmul": 70.0}, "forward": {"element-wise": 10.0}},
              {"backward": {"matmul": {"flops": 4e10, "raw_ms": 70.0, "tflops": 0.5, "peak_share": 0.5}},
               "forward": {"element-wise": {"bytes": 3e9, "raw_ms": 10.0, "gbps": 300.0}}})
    r = plain(gap.pair(side(a), side(b)))
    said = [w for w in r["why"] if w.startswith(("framework", "implementation"))]
    assert said[0].startswith("framework: backward / matmul (+20.0 ms)") and "50% of jax/jit's peak" in said[0]
    assert "torch's at 80%" in said[0]
    assert said[1].startswith("implementation: forward / element-wise (+5.0 ms): jax/jit does 3.0x the bytes")


def test_a_row_said_names_the_slower_sides_largest_ops_in_it() -> None:
    """Op by op: the sentence of a gap row ends with the slower run's largest ops of that phase and category
    (not another row's, not the faster run's)."""
    from twinbench.explain import gap

    a = _side("jax:twin", 60.0, {"backward": {"element-wise": 1.0}},
              {"backward": {"element-wise": {"bytes": 1e8, "raw_ms": 1.0, "gbps": 100.0}}})
    b = _side("jax:torchax", 70.0, {"backward": {"element-wise": 11.0}},
              {"backward": {"element-wise": {"bytes": 2e9, "raw_ms": 11.0, "gbps": 180.0}}})
    b["kernels"] = [{"name": "fusion.1", "op": "transpose(jvp())/convert_element_type", "phase": "backward",
                     "category": "element-wise", "ms": 6.2},
                    {"name": "fusion.9", "op": "jvp(aten::view)/reshape", "phase": "forward",
                     "category": "element-wise", "ms": 9.0},
                    {"name": "fusion.2", "op": "transpose(jvp())/mul", "phase": "backward", "category": "element-wise",
                     "ms": 3.0},
                    {"name": "fusion.3", "op": "transpose(jvp())/add", "phase": "backward", "category": "element-wise",
                     "ms": 0.5}]
    a["kernels"] = [{"name": "fusion.7", "op": "x", "phase": "backward", "category": "element-wise", "ms": 1.0}]
    said = [w for w in plain(gap.pair(side(a), side(b)))["why"] if w.startswith("implementation")]
    assert said[0].endswith("largest there in jax:torchax: fusion.1 (transpose(jvp())/convert_element_type) 6.2 ms, "
                            "fusion.2 (transpose(jvp())/mul) 3.0 ms")


def test_two_programs_of_one_compiler_have_no_framework_gap() -> None:
    """Two XLA programs (the JAX twin against Hugging Face's Flax model, or a torchax program): the same FLOPs
    run slower on one side is how that side wrote the row (fp32 scores against bf16), not a framework's."""
    from twinbench.explain import gap

    a = _side("jax:hf-flax", 80.0, {"forward": {"attention": 7.0}},
              {"forward": {"attention": {"flops": 3e11, "raw_ms": 7.0, "tflops": 46.0, "peak_share": 0.23}}})
    b = _side("jax:twin", 94.0, {"forward": {"attention": 21.0}},
              {"forward": {"attention": {"flops": 3e11, "raw_ms": 21.0, "tflops": 14.0, "peak_share": 0.07}}})
    said = [w for w in plain(gap.pair(side(a), side(b)))["why"] if w.startswith(("framework", "implementation"))]
    assert said and said[0].startswith("implementation: forward / attention (+14.0 ms): the same FLOPs")
    assert "both compiled by XLA" in said[0] and not any(w.startswith("framework") for w in said)


def test_timing_phases_add_up_to_the_measured_step() -> None:
    """The timing method's phases sum to its own synced step (172 ms), not the measured one (148 ms): shown
    scaled to the measured step, with a note that says by how much; the raw figures are kept."""
    from twinbench.explain import gap
    from twinbench.explain.breakdown import PHASES, Breakdown

    b = Breakdown(steps_traced=1)
    b.add("forward", "matmul", 50.0)
    b.add("backward", "matmul", 90.0)
    b.finish(1, 148.0)
    timing = {"input": 10.0, "forward": 60.0, "backward": 80.0, "optimizer": 22.0, "rest": 0.0, "step": 172.0}
    e = plain(gap.explain_breakdown(b, "torch/eager", 148.0, timing, [], gap.trace_record("torch")))
    assert sum(e["timing"][p] for p in PHASES) == pytest.approx(148.0)
    assert e["timing"]["forward"] == pytest.approx(60.0 * 148 / 172)
    assert e["timing_raw"]["forward"] == 60.0
    assert any("sum to 172.0 ms" in n and "scaled by 0.86" in n for n in e["notes"])
    close = dict(timing, input=0.0, step=150.0)  # within 10%: scaled, no note
    e = plain(gap.explain_breakdown(b, "torch/eager", 148.0, close, [], gap.trace_record("torch")))
    assert sum(e["timing"][p] for p in PHASES) == pytest.approx(148.0)
    assert not any(n.startswith("timing:") for n in e["notes"])


@pytest.mark.parametrize("preset", ["tiny", "bert-tiny", "llama-tiny"])
def test_jax_twins_normalization_is_the_normalization_row(preset: str) -> None:
    """Each JAX twin's LayerNorm/RMSNorm ops carry a norm scope, so explain counts them as normalization, as
    torch's aten::layer_norm is; without it they fused into the blocks' element-wise and reduction rows."""
    import jax
    from flax import nnx

    from twinbench.data import tasks
    from twinbench.explain import taxonomy
    from twinbench.models import family as families
    from twinbench.models.options import ModelOptions
    from twinbench.spec import from_preset

    spec = from_preset(preset, {"steps": 1, "warmup": 0})
    fam = families.get(spec)
    model = fam.jax_model(spec.model, ModelOptions(), nnx.Rngs(0))
    x, y = tasks.run_data(spec, 1).batches[0]
    graphdef, params = nnx.split(model)

    def loss(params, x, y):
        return fam.jax_loss(nnx.merge(graphdef, params), x, y)

    text = jax.jit(jax.grad(loss)).lower(params, x, y).as_text(dialect="hlo", debug_info=True)
    names = [line.split('op_name="', 1)[1].split('"', 1)[0] for line in text.splitlines() if 'op_name="' in line]
    norm = [n for n in names if taxonomy.scope_category(n) == "normalization"]
    assert norm and any("transpose(" in n for n in norm)  # forward and backward


def test_work_a_compiler_fused_into_another_row_is_not_named() -> None:
    """Eager torch files a GELU's backward under element-wise; XLA fuses it into a layer norm's kernel, filed
    under normalization: element-wise -2.2 ms and normalization +1.5 ms are mostly one piece of work, so the
    summary names the element-wise row for no more than the two together (-0.7 ms: under 10% of the gap, not
    named), and never the idle row (host time, the profiler's own cost among it)."""
    from twinbench.explain import gap

    a = _side("torch:nanogpt", 40.0, {"backward": {"matmul": 17.5, "element-wise": 2.3, "normalization": 0.4},
                                      "forward": {"matmul": 8.8}, "rest": {"idle": 11.0}}, {})
    b = _side("jax:port", 20.0, {"backward": {"matmul": 6.3, "element-wise": 0.1, "normalization": 1.9},
                                 "forward": {"matmul": 2.9}, "rest": {"idle": 8.8}}, {})
    b["compiler"] = "XLA"  # what the JAX reader records of its trace
    r = plain(gap.pair(side(a), side(b)))
    first = r["summary"].splitlines()[0]
    assert "backward / matmul" in first and "forward / matmul" in first
    assert "element-wise" not in first.split("rows sum")[0] and "not named" in first
    assert "rest / idle +2.2 ms is host time no op covers" in first
    row = next(x for x in r["rows"] if x["row"] == "backward / element-wise")
    assert row["named_ms"] == pytest.approx(-0.7) and row["fused_with"] == ["backward / normalization"]
    # two eager programs: nothing fuses, the element-wise row is named for all of its difference
    b.update(run="jax:port", compiler="")
    row = next(x for x in plain(gap.pair(side(a), side(b)))["rows"] if x["row"] == "backward / element-wise")
    assert row["named_ms"] == pytest.approx(-2.2) and "fused_with" not in row  # the fact, never the run's label
    from twinbench.explain import causes

    assert causes.fuses(side({"run": "torch:torchax-port", "compiler": "XLA"}))  # a torchax program is XLA's too


def test_a_row_within_the_traced_steps_own_spread_is_not_named() -> None:
    """One recording's steps moved by 4 ms from one to the next: a 3 ms row is not told apart from that."""
    from twinbench.explain import gap

    a = _side("torch:a", 60.0, {"backward": {"matmul": 40.0, "element-wise": 5.0}, "forward": {"matmul": 15.0}}, {})
    b = _side("torch:b", 35.0, {"backward": {"matmul": 20.0, "element-wise": 2.0}, "forward": {"matmul": 13.0}}, {})
    a["step_spread_ms"] = 4.0
    r = plain(gap.pair(side(a), side(b)))
    first = r["summary"].splitlines()[0]
    assert "backward / matmul" in first and "element-wise" not in first.split("withheld")[0]
    assert "withheld: backward / element-wise +3.0 ms, within the measured noise of ±4.0 ms" in first
    a["step_spread_ms"] = 1.0  # steadier steps: the same row is named
    assert "backward / element-wise" in plain(gap.pair(side(a), side(b)))["summary"].splitlines()[0]
