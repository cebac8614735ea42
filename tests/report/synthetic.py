"""Synthetic records in the Record contract (record.py), shaped so every plot kind of the report has data.

A small cost model stands in for measurements: step time grows with batch x seq x layers and shrinks with
devices; JAX compiles longer but steps faster than torch eager, so break-evens exist; scan-layers compiles
in a time independent of depth. Numbers are invented: they test the report, not the frameworks.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from twinbench.record import Record, as_record, for_spec
from twinbench.spec import from_preset

STEP_BASE_MS = {("torch", "eager"): 12.0, ("torch", "compile"): 8.0, ("jax", "jit"): 7.0,
                ("jax", "scan-layers"): 7.4, ("jax", "mesh-dp"): 7.2, ("torch", "ddp"): 11.0}
COMPILE_PER_LAYER_S = {("torch", "eager"): 0.0, ("torch", "compile"): 4.0, ("jax", "jit"): 0.9,
                       ("jax", "scan-layers"): 0.0, ("jax", "mesh-dp"): 0.9, ("torch", "ddp"): 0.0}


def record(framework: str, strategy: str, *, layers: int = 4, batch: int = 8, seq: int = 128,
           devices: int = 1, stall: float | None = None, failed: str | None = None,
           **extra: Any) -> dict[str, Any]:
    spec = from_preset("small", {"layers": layers, "batch": batch, "seq": seq, "devices": devices},
                       framework=framework, strategy=strategy)
    if failed:
        return for_spec(spec, "failed", error=failed).flat() | extra
    key = (framework, strategy)
    step_ms = STEP_BASE_MS[key] * (batch * seq / 1024) * (layers / 4) / devices ** 0.8
    compile_s = 0.2 + COMPILE_PER_LAYER_S[key] * (1 if strategy == "scan-layers" else layers)
    if strategy == "scan-layers":
        compile_s += 1.5
    losses = [5.5 * 0.93 ** i + (0.01 if framework == "jax" else 0.0) for i in range(30)]
    measured = dict(
        n_params=3_300_000, device="Synthetic CPU", device_count=devices, platform="cpu", threads=2,
        compile_s=compile_s, first_step_s=compile_s + step_ms / 1e3, step_ms=step_ms,
        step_ms_p10=step_ms * 0.95, step_ms_p90=step_ms * 1.1,
        tokens_per_s=batch * seq / (step_ms / 1e3), flops_per_token=20_000_000, achieved_tflops=0.05,
        peak_tflops=0.2, mfu=0.25, peak_mem_bytes=(300 if framework == "torch" else 450) * 2**20,
        peak_mem_source="process peak RSS", compiles_during_steps=0, compiles_total=1,
        loss_first=losses[0], loss_last=losses[-1], losses=losses, matmul_precision="fp32 (no TF32)",
        versions={"python": "3.11.7", framework: "0.0-synthetic"}, wall_s=30 * step_ms / 1e3 + compile_s,
    )
    rec = for_spec(spec, "ok", **measured).flat()
    if stall is not None:
        rec["input_stall_pct"] = stall
        rec["input_wait_ms"] = stall / 100 * step_ms
    return rec | extra


def full_set() -> list[dict[str, Any]]:
    """Records that give every plot kind of the report its data (a compare plus sweeps), one failure."""
    recs = [record("torch", "eager"), record("torch", "compile"), record("jax", "jit"),
            record("jax", "scan-layers")]
    recs += [record(fw, st, batch=b) for b in (4, 16, 32) for fw, st in (("torch", "eager"), ("jax", "jit"))]
    recs += [record(fw, st, seq=s) for s in (32, 64) for fw, st in (("torch", "eager"), ("jax", "jit"))]
    recs += [record("jax", st, layers=n) for n in (2, 8, 12) for st in ("jit", "scan-layers")]
    recs += [record(fw, st, devices=d, batch=b) for d, b in ((1, 8), (2, 8), (4, 8), (1, 32), (4, 32))
             for fw, st in (("jax", "mesh-dp"), ("torch", "ddp"))]  # 4 devices: 2 and 8 per device
    recs += [record("torch", "eager", seq=96, stall=3.0), record("jax", "jit", seq=96, stall=41.0)]
    recs.append(record("torch", "compile", layers=12, failed="out of memory: CUDA out of memory (synthetic)"))
    return recs


def compare_set() -> list[dict[str, Any]]:
    """One configuration, several strategies: what a plain `twinbench compare` writes."""
    return [record("torch", "eager"), record("torch", "compile"), record("jax", "jit"),
            record("jax", "scan-layers")]


def typed(records: list[dict[str, Any]]) -> list[Record]:
    """The records as the loader reads them (``record.as_record``): what the commands are given in-process."""
    return [as_record(r) for r in records]


def write(directory: Path, records: list[dict[str, Any]], extra_lines: Sequence[str] = ()) -> Path:
    """Write ``records`` (then ``extra_lines`` verbatim, e.g. malformed ones) as ``directory/results.jsonl``."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "results.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + "".join(x + "\n" for x in extra_lines))
    return path
