"""The compare table and its conditions (report/table.py): whole tables off a terminal, a TPU run's
conditions in a TPU's words, and failed records that still say what they were."""

from __future__ import annotations

import dataclasses
import io
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from synthetic import record as flat_record

from twinbench import backends, runner
from twinbench.measure import device, memory
from twinbench.record import Record, as_record
from twinbench.report.table import conditions, markdown, print_table, rich_table
from twinbench.spec import from_preset, validate


def record(*args: Any, **kwargs: Any) -> Record:
    """A synthetic record as the commands are given it (typed)."""
    return as_record(flat_record(*args, **kwargs))


RUN = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "tpu" / "v5e_run.json").read_text())


def records() -> list[dict[str, Any]]:
    base = [record("torch", "eager"), record("jax", "jit"), record("torch", "compile"), record("jax", "scan-layers")]
    return [*base, record("jax", "jit", layers=8, failed="out of memory: RESOURCE_EXHAUSTED " + "x" * 200)]


def printed(width: int, terminal: bool) -> str:
    buf = io.StringIO()
    console = Console(file=buf, width=width, force_terminal=terminal, color_system=None)
    print_table(console, rich_table(records(), 1000))
    return buf.getvalue()


def test_off_a_terminal_the_table_is_whole() -> None:
    text = printed(60, terminal=False)
    assert "…" not in text
    for header in ("step ms (p10-p90)", "loss first→last", "total s @ 1000", "recompiles"):
        assert header in text, header  # every header on one line, unbroken
    assert max(len(line) for line in text.splitlines()) > 60
    narrow = printed(60, terminal=True)  # on a terminal: its width, folded as rich does
    assert max(len(line) for line in narrow.splitlines()) <= 60


def tpu_record(**extra: Any) -> Record:
    gpt = RUN["gpt2_124m"]
    return as_record(flat_record("jax", "jit", device=RUN["device_kind"], platform="tpu", precision="bf16",
                  matmul_precision=backends.get("jax").fp32_matmul_words("tpu", False)
                  + "; jax_default_matmul_precision=highest",
                  host_cpu="AMD (AVX2, FMA)", peak_tflops_datasheet=197.0, **extra) | {
        "memory_breakdown": dataclasses.asdict(memory.device_peak(
            "tpu", gpt["allocator_peak_bytes"], device.ALLOCATOR_PEAK, gpt["memory_analysis"]))
        | {"parts": {"params": 1}, "accounted": 0.99, "unaccounted_bytes": 0}})


def test_a_tpu_run_is_described_in_a_tpus_words() -> None:
    lines = "\n".join(conditions([tpu_record()]))
    assert "TPU v5 lite (tpu), host AMD (AVX2, FMA)" in lines
    assert "6 bf16 passes" in lines and "no TF32" not in lines
    assert "datasheet dense peak: 197 TFLOP/s bf16" in lines
    assert "the compiled step's peak, the allocator's was 1.52 GiB" in lines


def test_torch_on_the_cpu_beside_jax_on_a_tpu_names_torchax() -> None:
    lines = "\n".join(conditions([record("torch", "eager"), tpu_record()]))
    assert "did a framework miss the TPU?" in lines and "GPU" not in lines
    assert "; torch runs on the TPU through torchax (a torch model as one JAX program" in lines
    jax_off = "\n".join(conditions([record("jax", "jit"), tpu_record()]))
    assert "did a framework miss the TPU?" in jax_off and "torchax" not in jax_off  # JAX has a TPU build
    gpu = "\n".join(conditions([record("torch", "eager"), record("jax", "jit", platform="gpu", device="NVIDIA H100")]))
    assert "did a framework miss the GPU?" in gpu and "torchax" not in gpu


def test_a_run_that_times_out_still_says_what_it_was(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The worker tells the runner what it knows of itself as it learns it (worker.known_path); a run killed
    by --timeout keeps its device, platform, matmul precision and parameter count."""
    known = {"device": RUN["device_kind"], "platform": "tpu", "n_params": 124_439_808,
             "matmul_precision": "fp32 as 6 bf16 passes; jax_default_matmul_precision=highest", "devices_visible": 1}
    code = ("import json, sys, time; from pathlib import Path; out = Path(sys.argv[2]); "
            f"out.with_name(out.name + '.known').write_text(json.dumps({known!r})); time.sleep(60)")
    monkeypatch.setattr(runner, "worker_command", lambda spec, args: [sys.executable, "-c", code, *args])
    spec = validate(from_preset("tiny", {"steps": 2, "warmup": 1}, framework="jax", strategy="jit"))
    rec = runner.run_one(spec, timeout=3)
    assert rec.status == "failed" and "timed out" in rec.error
    for k, v in known.items():
        assert rec.field(k) == v, k
    text = "\n".join(conditions([rec]))
    assert "124.44 M params" in text and "TPU v5 lite (tpu)" in text and "matmul None" not in text
    # a worker that died before it knew anything: the record is as before, without those fields
    monkeypatch.setattr(runner, "worker_command", lambda spec, args: [sys.executable, "-c", "raise SystemExit(3)"])
    dead = runner.run_one(spec, timeout=30)
    assert dead.status == "failed" and dead.run.device is None


def test_the_conditions_name_each_run_as_its_row_does() -> None:
    """A cold and a warm run of one configuration (``--cache both``): the footer's lines about each (its memory,
    its step without a sync per step, its attention kernel) say which, as the table's rows do."""
    runs = [tpu_record(compile_cache=c, step_ms_async=6.0, attention_kernel="splash (Pallas TPU, fused)")
            for c in ("cold", "warm")]
    lines = conditions(runs)
    memory_lines = [x for x in lines if x.startswith("memory ")]
    assert [x.split(":")[0] for x in memory_lines] == ["memory jax/jit cold", "memory jax/jit warm"]
    (async_line,) = [x for x in lines if x.startswith("step ms without a sync")]
    assert "jax/jit cold 6.0 ms" in async_line and "jax/jit warm 6.0 ms" in async_line
    (kernel_line,) = [x for x in lines if x.startswith("attention kernel")]
    assert kernel_line.endswith("(jax/jit cold, jax/jit warm)")
    table = markdown(runs, 1000)
    assert "| jax/jit cold |" in table and "| jax/jit warm |" in table


def test_an_mfu_past_the_peak_is_not_printed_as_a_share_and_the_peak_is_blamed() -> None:
    """A run faster than the matmul peak it is set against (a peak measured under load reads low) shows no
    '112%': its cell says so and a line says which figure is wrong and how to measure it again."""
    from twinbench.report.table import OVER_PEAK, row

    fast = as_record(flat_record("jax", "jit", mfu=1.12, peak_tflops=0.05))
    fine = as_record(flat_record("torch", "eager", mfu=0.31, peak_tflops=0.05))
    assert OVER_PEAK in row(fast, 1000) and "112%" not in row(fast, 1000) and "31%" in row(fine, 1000)
    said = "\n".join(conditions([fast, fine]))
    assert f"MFU '{OVER_PEAK}'" in said and "--remeasure" in said
    assert f"MFU '{OVER_PEAK}'" not in "\n".join(conditions([fine]))
