"""``twinbench predict``: a step's time, MFU and memory on a device this machine does not have."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any, Optional

import typer

from twinbench.cli.common import (
    PRESET_OPTION,
    app,
    check_json,
    check_timeout,
    console,
    fail,
    with_spec_flags,
    write_text,
)
from twinbench.config import SpecError
from twinbench.plan import build_specs
from twinbench.predict.datasheets import DATASHEETS


@app.command("predict")
@with_spec_flags
def predict_cmd(
    preset: str = PRESET_OPTION,
    strategies: Optional[str] = typer.Option(  # noqa: UP045
        None, help="comma-separated strategy names (framework:name to pick one), as compare takes them; default "
                   "jax:jit+bf16, with --model torch:eager and jax:torchax (jax:port with --jax-model)"),
    framework: str = typer.Option("torch,jax", help="comma-separated: torch, jax"),
    device: str = typer.Option(..., "--device", help=f"the device to predict for: {', '.join(DATASHEETS)}, or "
                               "here (this machine's CPU)"),
    calibrate: Optional[Path] = typer.Option(None, "--calibrate", help="your measured twinbench results.jsonl: "  # noqa: UP045
                                             "fit the predictions of its kinds (platform x framework) to it"),
    model: Optional[str] = typer.Option(None, "--model", help="your own PyTorch model, FILE.py:build (as compare; "  # noqa: UP045
                                        "built once and traced, no step run)"),
    jax_model: Optional[str] = typer.Option(None, "--jax-model", help="your own JAX port of --model, "  # noqa: UP045
                                            "FILE.py:build_jax: its step is the jax:port strategy"),
    json_path: Optional[Path] = typer.Option(None, "--json", help="also write the predictions here"),  # noqa: UP045
    compile_: bool = typer.Option(False, "--compile", help="TPU devices, JAX strategies: compile the step here "
                                  "with the TPU compiler (libtpu, no TPU needed; a minute or two a strategy) for "
                                  "the memory the chip would report, instead of the estimate from the shapes"),
    timeout: float = typer.Option(600.0, help="seconds before building --model (importing and building it once, in "
                                  "its own process) is stopped: a model that hangs ends in one line"),
    **overrides: Any,
) -> None:
    """Predict the step on a device you do not have, from the program read here (no training step runs).

    --devices N adds the data-parallel curve (N -> step, speed-up: the gradient all-reduce over the device's
    interconnect, with the framework's overlap); the program itself is read for one device.

    Each op of the step costs the longer of its FLOPs at the device's peak and its bytes at its memory
    bandwidth (a roofline, docs/predict.md); the error bar is how far such predictions were from measured steps.
    """
    from twinbench.limits import MAX_DEVICES, count
    from twinbench.predict.calibration import CalibrationError
    from twinbench.predict.command import PeakUnavailable, run
    from twinbench.predict.datasheets import DEVICES
    from twinbench.predict.text import render
    from twinbench.predict.tpu_compile import TpuCompileUnavailable

    if device.strip().lower() not in DEVICES:
        fail(f"--device: unknown device {device!r}; known: {', '.join(DEVICES)}")
    devices = overrides.pop("devices", None)  # --devices N: the curve up to N; the program is one device's
    devices = 1 if devices is None else devices
    if not 1 <= devices <= MAX_DEVICES:
        fail(f"--devices must be 1 to {MAX_DEVICES:,} (2^20, past every machine built), got {count(devices)}")
    if calibrate is not None and not calibrate.is_file():
        fail(f"--calibrate: {calibrate} is not a file")
    check_json(json_path)
    check_timeout(timeout)
    user: dict[str, str] = {}
    if model or jax_model:
        from twinbench.byo.plan import user_fields

        user = user_fields(model, jax_model)  # --jax-model alone: one line, as compare
    if strategies is None:  # a user's model has no JAX twin: its JAX side is torchax or the port
        strategies = ("torch:eager,jax:port" if jax_model else "torch:eager,jax:torchax") if model else "jax:jit+bf16"
    specs = build_specs(preset, framework, strategies, overrides, **user)
    from twinbench.predict.command import check_covered

    check_covered(specs)  # a strategy predict does not read: one line before --model is prepared
    say = progress() if model else None
    with tempfile.TemporaryDirectory(prefix="twinbench-predict-") as tmp:
        if model:  # built once, its initial weights written; no check run (predict/user.py)
            from twinbench.predict.user import prepare

            specs = prepare(specs, Path(tmp), timeout, say or (lambda line: None))
        try:
            preds, lines = run(specs, device.strip().lower(), devices, calibrate, compile_, say)
        except (CalibrationError, OSError, TpuCompileUnavailable) as e:
            fail(str(e))
        except PeakUnavailable as e:
            fail(str(e), code=1)
        except SpecError:
            raise  # a bad flag or a record's unknown preset: one line, exit 2 (with_spec_flags)
        except Exception as e:  # reading the program failed: what, where and why in one line
            from twinbench.errors import error_line

            fail(f"predict: reading the step's program failed: {error_line(e)}", code=1)
    for line in lines:
        console.print(line, highlight=False, soft_wrap=True)
    for pred in preds:
        console.print(render(pred), highlight=False, soft_wrap=True, markup=False)
    if json_path is not None:
        import msgspec

        text = json.dumps(msgspec.to_builtins([p.to_json() for p in preds]), indent=1)
        write_text(json_path, text + "\n", "--json")


def progress() -> Any:
    """``say(line)``: one line on stderr with the seconds since predict started, so a model read at the sizes
    people train is never silent."""
    import time

    start = time.perf_counter()

    def say(line: str) -> None:
        console.print(f"predict [{time.perf_counter() - start:.0f} s]: {line}", highlight=False, markup=False,
                      soft_wrap=True)

    return say
