"""The parent side of ``compare --model``: which runs, and the checks done once before any of them starts.

:func:`build_specs` turns ``--model`` / ``--jax-model`` and ``--strategies`` into validated RunSpecs (family
``user``, task ``custom``); :func:`prepare` runs the preparation process (torch only: ``build(cfg)``, the checks,
the initial weights every run loads) and, with a ``--jax-model``, the parity process (JAX), both through the
runner. A bad ``--model`` raises :class:`~twinbench.spec.SpecError` (one line, exit 2) before anything is
measured. This module imports neither framework.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import msgspec

from twinbench.byo import UserModelError, needs_port, split_ref
from twinbench.record import Record, typed
from twinbench.record_sections import Parity, Tolerances
from twinbench.spec import RunSpec, SpecError, from_preset, validate, with_precision
from twinbench.spec_sections import split_name
from twinbench.tasks import USER_TASK

#: What a --model compare runs without --strategies (plus jax/port with a --jax-model).
DEFAULTS = [("torch", "eager"), ("torch", "compile-regional"), ("jax", "torchax")]
DIR = "byo"  # under the results directory: init.safetensors, meta.json, torch_ref.npz, parity.json


def _ref(ref: str, default: str, flag: str) -> str:
    """``ref`` with an absolute path (the workers run elsewhere), or SpecError if the file is missing."""
    try:
        path, name = split_ref(ref, default, flag)
    except UserModelError as e:
        raise SpecError(str(e)) from None
    return f"{path}:{name}"


def cell_reason(framework: str, full: str) -> str | None:
    """None if a user model can run ``framework:full``; else the registry's one-line reason it cannot."""
    from twinbench.byo.family import UserFamily
    from twinbench.strategies import registry

    return registry.cell_reason(UserFamily(), framework, full)


def select(frameworks: list[str], names: list[str] | None, port: bool) -> list[tuple[str, str]]:
    """The (framework, strategy) pairs of a user-model compare: the registry's cells the user family can run
    (``registry.cell_reason``); names that cannot run one are errors with the cell's reason."""
    from twinbench.strategies import registry

    def runs(fw: str, full: str) -> bool:
        return cell_reason(fw, full) is None and (port or not needs_port(full.split("+")[0]))

    if names is None:
        pairs = [p for p in DEFAULTS if p[0] in frameworks]
        return pairs + [(f, "port") for f in frameworks if port and (f, "port") in registry.REGISTRY]
    if names == ["all"]:
        return [(f, n) for (f, n) in registry.REGISTRY if f in frameworks and runs(f, n)]
    allowed = sorted({n for (f, n) in registry.REGISTRY if f in frameworks and runs(f, n)})
    chosen: list[tuple[str, str]] = []
    for raw in names:
        fw_part, _, full = raw.rpartition(":")
        base, _ = split_name(full)
        fws = [fw_part] if fw_part else [f for f in frameworks if (f, base) in registry.REGISTRY]
        if needs_port(base) and not port:
            raise SpecError(f"--strategies: {base!r} measures the user's own JAX port: give --jax-model "
                            "FILE.py:build_jax")
        if not fws:
            raise SpecError(f"--strategies: unknown strategy {raw!r} for a user model (--model); allowed: "
                            f"{', '.join(allowed)}")
        for fw in fws:
            registry.get(fw, full)  # the names exist and the modifiers fit the base
            why = cell_reason(fw, full)
            if why:
                raise SpecError(f"--strategies: {fw}:{full} with a user model (--model): {why}")
            chosen.append((fw, full))
    return list(dict.fromkeys(chosen))


def multi_device_bases() -> list[str]:
    """The bases that run a user model on several devices (the registry's multi-device cells it can run)."""
    from twinbench.strategies import registry

    return [n for (f, n), s in registry.REGISTRY.items() if s.multi_device and cell_reason(f, n) is None]


def build_specs(preset: str, frameworks: list[str], names: list[str] | None, overrides: dict[str, Any],
                user_model: str, user_jax_model: str = "", **top: Any) -> list[RunSpec]:
    """One validated RunSpec per selected run of the user's model (no framework imported)."""
    model = _ref(user_model, "build", "--model")
    jax_model = _ref(user_jax_model, "build_jax", "--jax-model") if user_jax_model else ""
    given = {k for k, v in overrides.items() if v not in (None, USER_TASK)}  # the flags the command line set
    if "task" in given or {"init_from", "data"} & {k for k in given if overrides[k]}:
        raise SpecError("--model: the user's model brings its own batches and weights; --task, --data and "
                        "--init-from do not apply")
    base = from_preset(preset, overrides, **top)
    how_bf16 = "--precision bf16" if "precision" in given and base.train.precision == "bf16" else ""
    base = base.evolve(model=replace(base.model, family="user"), train=replace(base.train, task=USER_TASK),
                   user_model=model, user_jax_model=jax_model)
    validate(base)
    from twinbench.strategies import registry

    chosen = select(frameworks, names, bool(jax_model))
    one = [n for f, n in chosen if not registry.get(f, n).multi_device]
    if base.launch.devices > 1 and one:
        raise SpecError(f"--devices {base.launch.devices}: {one[0]!r} runs a user model on one device; on several: "
                        f"{', '.join(multi_device_bases())}")
    if not chosen:
        raise SpecError(f"--strategies: nothing selected for --framework {','.join(frameworks)}")
    specs = [validate(with_precision(base.evolve(framework=fw, strategy=name))) for fw, name in chosen]
    for s in specs:  # +bf16 (or --precision bf16): the JAX bases that honour it (torchax: torchax's autocast)
        base = registry.get(s.framework, s.strategy.base)
        if s.strategy.mods.bf16 and registry.modifier_reason(registry.MODIFIERS["bf16"], base) is not None:
            how = how_bf16 or f"{s.framework}:{s.strategy.name}"
            raise SpecError(f"{how}: jax {s.strategy.base!r} of a user model runs fp32 only; bf16 runs with "
                            "jax:torchax+bf16 and the torch strategies (+bf16)")
    return list({(s.framework, s.strategy.name): s for s in specs}.values())


def user_fields(model: str | None, jax_model: str | None) -> dict[str, str]:
    """The RunSpec fields of ``--model`` / ``--jax-model`` (none without ``--model``), for every command that
    takes them; a ``--jax-model`` alone is a user error."""
    if jax_model and not model:
        raise SpecError("--jax-model: a JAX port is measured beside its torch model: give --model FILE.py:build too")
    return {"user_model": model, "user_jax_model": jax_model or ""} if model else {}


def prepare_user(specs: list[RunSpec], out_dir: Path, timeout: float,
                 per_shape: bool = False) -> tuple[list[RunSpec], Parity | None]:
    """The one preparation of a user's model, before any run, for every command that takes ``--model``.

    Specs without a user model come back as they are. Otherwise the model is checked and its initial weights
    written (a SpecError, exit 2, when it is bad): once for them all with the port's parity (:func:`prepare`),
    or with ``per_shape`` once per shape of a grid (:func:`prepare_points`, sweep and claims; no parity).
    """
    if not any(s.user.user_model for s in specs):
        return specs, None
    if per_shape:
        return prepare_points(specs, out_dir, timeout), None
    return prepare(specs, out_dir, timeout)


def prepare_points(specs: list[RunSpec], out_dir: Path, timeout: float) -> list[RunSpec]:
    """:func:`prepare` once per shape of a sweep (the points that differ only in devices, framework or strategy
    share their initial weights and eager reference): ``out_dir/byo`` for the first, ``out_dir/shape-<i>/byo``
    for the others."""
    groups: dict[str, list[int]] = {}
    for i, s in enumerate(specs):
        key = s.evolve(framework="torch", strategy="eager", devices=1).run_id()
        groups.setdefault(key, []).append(i)
    done: list[RunSpec | None] = [None] * len(specs)
    for n, idx in enumerate(groups.values()):
        prepared, _ = prepare([specs[i] for i in idx], out_dir if n == 0 else out_dir / f"shape-{n}", timeout)
        for i, s in zip(idx, prepared, strict=True):
            done[i] = s
    return [s for s in done if s is not None]


def prepare(specs: list[RunSpec], out_dir: Path, timeout: float) -> tuple[list[RunSpec], Parity | None]:
    """Check the user's model and write its initial weights (and the port's parity) before any run.

    Returns the specs pointing at ``out_dir/byo`` and the parity result (None without a --jax-model).
    """
    target = (out_dir / DIR).resolve()
    target.mkdir(parents=True, exist_ok=True)
    specs = [s.evolve(user_dir=str(target)) for s in specs]
    first = specs[0]
    run_child("twinbench.byo.prepare", first, target, timeout,
              f"--model {first.user.user_model}: checking the model failed")
    if not first.user.user_jax_model:
        return specs, None
    run_child("twinbench.byo.parity", first, target, timeout,
              f"--jax-model {first.user.user_jax_model}: the parity check failed")
    return specs, msgspec.json.decode((target / "parity.json").read_bytes(), type=Parity)  # byo/parity.py wrote it


def run_child(module: str, spec: RunSpec, target: Path, timeout: float, failed: str) -> None:
    """``python -m MODULE SPEC.json TARGET`` through the runner, the spec written to a temporary file: the one way a
    user's model is built in a process of its own (compare's check and parity, predict's build). Its exit code 2
    is a problem with the user's file, said in its own line; any other failure is ``failed: reason``. A
    SpecError (one line, exit 2) either way."""
    from twinbench import runner

    with tempfile.TemporaryDirectory(prefix="twinbench-byo-") as tmp:
        spec_path = Path(tmp, "spec.json")
        spec_path.write_text(json.dumps(spec.to_dict()))
        code, reason = runner.run_module(module, [str(spec_path), str(target)], timeout)
    if code:
        raise SpecError(reason if code == 2 else f"{failed}: {reason}")


def _num(x: float | None, spec: str) -> str:
    return "?" if x is None else format(x, spec)


def _e(x: float | None) -> str:
    return format(float("nan") if x is None else x, ".1e")


def parity_lines(parity: Parity) -> list[str]:
    """The parity check in a few lines, printed before the measurements."""
    tol = parity.tolerances or Tolerances()
    verdict = "OK" if parity.ok else "MISMATCH (measured anyway; the port computes something else)"
    worst = parity.grad_worst
    where = ("; largest in " + ", ".join(f"{k} ({v:.1e})" for k, v in worst)) if worst and not parity.ok else ""
    last_t, last_j = (parity.losses_torch or [None])[-1], (parity.losses_jax or [None])[-1]
    return [f"parity of the JAX port against the torch model: {verdict}",
            f"  loss on batch 0: torch {_num(parity.loss_torch, '.6f')}, port {_num(parity.loss_jax, '.6f')} "
            f"(relative difference {_num(parity.loss_rel, '.1e')}, tolerance {tol.loss_rel:g})",
            f"  gradients on batch 0: largest difference {_num(parity.grad_rel, '.1e')} of the largest gradient "
            f"(tolerance {tol.grad_rel:g}){where}",
            f"  {parity.steps} AdamW steps: losses differ by at most {_num(parity.steps_abs, '.1e')} "
            f"(tolerance {tol.steps_abs:g}); last: torch {_num(last_t, '.5f')}, port {_num(last_j, '.5f')}"]


def parity_summary(parity: Parity | None) -> str | None:
    """One line for the reports when the port's parity check failed (None when it passed or did not run)."""
    if parity is None or parity.ok is not False:
        return None
    worst = parity.grad_worst
    where = (" (largest in " + ", ".join(f"{k} {v:.1e}" for k, v in worst) + ")") if worst else ""
    return (f"parity MISMATCH: the JAX port does not compute what the torch model does (loss relative difference "
            f"{_e(parity.loss_rel)}, gradients' largest difference {_e(parity.grad_rel)} of the largest "
            f"gradient{where}, losses after {_num(parity.steps, 'd')} steps differ by {_e(parity.steps_abs)}): its "
            "timings are of another computation")


def read_parity(out_dir: Path) -> Parity | None:
    """The port's parity check of a results directory (``byo/parity.json``), None when none or unreadable (not
    the check's shape); read bounded, its strings stripped (folder_io: a results folder is data)."""
    from twinbench.folder_io import cut, read_json

    try:
        return msgspec.convert(cut(read_json(Path(out_dir) / DIR / "parity.json")), Parity)
    except (OSError, ValueError):  # msgspec's ValidationError is a ValueError
        return None


def _uses_nnx(r: Record) -> bool:
    """Whether the run's JAX code is Flax NNX: a port whose file mentions ``nnx`` (read, never run)."""
    ref = str(r.value("user_jax_model") or "")
    if not needs_port(r.run.strategy.split("+")[0]) or not ref:
        return False
    from twinbench.folder_io import read_small

    try:  # a file a record names: a regular file of at most 4 MB (never /dev/zero), read as text
        return b"nnx" in read_small(Path(ref.rpartition(":")[0] or ref), 4 << 20)
    except OSError:
        return True  # cannot tell: keep the advice


def _fix_for(fix: str, r: Record) -> str:
    """A finding's fix as it applies to this run, in its framework's words (its backend's ``advice``: a JAX run
    drops the PyTorch advice, and the Flax NNX advice for code that is not NNX)."""
    from twinbench import backends

    return backends.get(r.run.framework).advice(fix, lambda: _uses_nnx(r))


class _Finding(msgspec.Struct, frozen=True):
    """What :func:`doctor_lines` prints of a finding of the doctor's report (doctor/findings ``to_dict``)."""

    severity: str | None = None
    title: str | None = None
    fix: str = ""


class _Watched(msgspec.Struct, frozen=True):
    """What :func:`doctor_lines` reads of the doctor's report in a record (byo/run.py ``doctor_findings``); a
    report that is not of this shape (a hand-made record's) is read as none."""

    error: str | None = None
    findings: list[_Finding] | None = None  # None: the doctor did not report (an error, or no doctor)
    steps: int = 0


def _watched(doc: dict[str, Any]) -> _Watched:
    try:
        return msgspec.convert(doc, _Watched)
    except msgspec.ValidationError:
        return _Watched()


def doctor_lines(records: list[Record] | list[dict[str, Any]]) -> list[str]:
    """The doctor's findings on each JAX run of a user model (record field ``doctor``), one line per distinct
    finding: the same finding on several runs is one line naming them all; the advice is the run's own (no
    PyTorch advice on a JAX run, no Flax NNX advice for code that is not NNX)."""
    seen: dict[str, list[str]] = {}
    for r in typed(records):
        doc = _watched(r.doctor)
        label = r.label()
        if doc.error:
            seen.setdefault(f"could not watch the run: {doc.error}", []).append(label)
        for f in doc.findings or []:
            text = f"[{f.severity}] {f.title}; fix: {_fix_for(f.fix, r)}"
            seen.setdefault(text, []).append(label)
        if doc.findings == []:
            seen.setdefault(f"no findings over {doc.steps} watched steps", []).append(label)
    return [f"doctor {', '.join(dict.fromkeys(labels))}: {text}" for text, labels in seen.items()]
