"""``python -m twinbench.environment --tpu`` on a TPU VM where only JAX and libtpu come preinstalled (the
imports, the installed packages and JAX's backend faked): one line per missing piece, with what to do, and a
non-zero exit only when something required is missing."""

from __future__ import annotations

from typing import Any

import jax
import pytest

from twinbench import environment

REAL_INSTALLED, REAL_VERSION = environment._installed, environment._version


def tpu_vm(monkeypatch: pytest.MonkeyPatch, missing: set[str], libtpu: str | None = "0.0.42.1",
           backend: str = "tpu") -> None:
    def import_module(name: str) -> Any:  # nothing is really imported: the check reads only the outcome
        if name.split(".")[0] in missing:
            raise ModuleNotFoundError(f"No module named '{name}'")
        return object()

    def installed(name: str) -> bool:
        return name.split(".")[0] not in missing and REAL_INSTALLED(name)

    def version(name: str) -> str | None:
        if name == "libtpu" and libtpu:
            return libtpu
        if name in missing or name in environment.LIBTPU:
            return None
        return REAL_VERSION(name)

    monkeypatch.setattr(environment, "_import", import_module)
    monkeypatch.setattr(environment, "_installed", installed)
    monkeypatch.setattr(environment, "_version", version)
    monkeypatch.setattr(jax, "default_backend", lambda: backend)


def test_a_tpu_vm_with_jax_and_libtpu_only_is_ready_with_a_note_per_optional_piece(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    tpu_vm(monkeypatch, {"torch", "grain", "submitit", "torchax"})
    assert environment.main(["--tpu"]) == 0
    out = capsys.readouterr()
    notes = out.err.strip().splitlines()
    assert len(notes) == 4 and all(n.startswith("preflight: note: ") for n in notes)
    for name, what in (("torch", "download.pytorch.org/whl/cpu"), ("grain", "+prefetch"),
                       ("submitit", "--launcher"), ("torchax", "pip install torchax")):
        assert any(name in n and what in n for n in notes), name
    assert "preflight: ok" in out.out and "libtpu 0.0.42.1" in out.out
    # the same machine checked as a GPU or plain sitting: torch is required there
    assert any(p.startswith("torch: cannot be imported") for p in environment.problems())


def test_no_libtpu_and_jax_on_the_cpu_is_refused(monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    tpu_vm(monkeypatch, {"grain"}, libtpu=None, backend="cpu")
    assert environment.main(["--tpu"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    problems = [line for line in err if not line.startswith("preflight: note:")]
    assert len(problems) == 2
    assert "libtpu is not installed" in problems[0] and "runs on 'cpu', not the TPU" in problems[1]
    assert sum("grain" in line for line in err) == 1


def test_a_required_piece_missing_on_a_tpu_vm_is_a_problem(monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    tpu_vm(monkeypatch, {"flax", "torch"})
    assert environment.main(["--tpu"]) == 2
    err = capsys.readouterr().err
    assert "preflight: flax: cannot be imported" in err and "preflight: torch: cannot" not in err


def test_torchax_is_checked_as_the_runs_import_it() -> None:
    """torchax 0.0.13's plain import fails on torch 2.13 ("aten.prod has no overload name dim_Dimname"), which
    twinbench's compatibility layer handles: the preflight imports it the same way, so an installed torchax
    gets no note. A fresh process, since an earlier import in this one would hide the difference."""
    import subprocess
    import sys

    code = ("from twinbench import environment; "
            "print([n for n in environment.tpu_notes() if n.startswith('torchax')])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]", out.stdout
