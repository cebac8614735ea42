"""Any profiler trace a user already has, read into the same :class:`Breakdown` a twinbench run gives.

A trace is a ``torch.profiler`` Chrome trace (``.json`` / ``.json.gz``; a directory of them, one per rank) or a
JAX profile (a ``*.xplane.pb`` or the directory ``jax.profiler`` wrote). :func:`read` detects which, picks one
rank (``rank``; default the lowest) and one device (``device``; default the first with kernels), finds the
steps (:mod:`.steps`: ``--step-marker``, the profiler's step events, the user's annotations, or the repeating
pattern) and hands over to :mod:`.torch_trace` or :mod:`.jax_trace`, the readers the run path uses. JAX's
compiled HLO text is optional (``hlo``: a file, or an ``--xla_dump_to`` directory; a ``step.hlo.txt`` beside the
profile, as twinbench writes it, is found by itself): without it the categories come from the kernels' and ``hlo_op`` names.
"""

from __future__ import annotations

import re
from enum import StrEnum
from pathlib import Path

from twinbench.explain import answer, doctor_timing, files, jax_trace, torch_trace
from twinbench.explain.breakdown import Breakdown
from twinbench.explain.steps import TraceError
from twinbench.hlo_text import dumped_module

#: ``--steps A:B`` as :func:`steps.parse_window` reads it; None: every step found
Window = tuple[int | None, int | None] | None



class TraceKind(StrEnum):
    """Which profiler wrote a trace, told by its content (:func:`resolve`): the reader it goes to. A ``StrEnum``:
    a trace's label and its record read it as the framework's name."""

    TORCH = "torch"  # a torch.profiler Chrome trace: torch_trace
    JAX = "jax"  # a jax.profiler profile (an xplane): jax_trace (tpu_trace for a TPU's)


_RANK = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)


def is_trace(arg: str) -> bool:
    """Whether an explain argument names a trace (a path that exists) rather than a run."""
    return Path(arg).exists()


def _rank_of(path: Path, i: int) -> int:
    m = _RANK.search(path.name)
    return int(m.group(1)) if m else i


def _beside(p: Path) -> Path:
    """The profile a JAX Chrome export stands for: ``HOST.xplane.pb`` of its own host beside it, else the
    latest ``*.xplane.pb`` of its folder (a TraceError when there is none)."""
    stem = p.name.split(".")[0]
    own = [p.parent / f"{stem}.xplane.pb", p.parent / f"{stem}.xplane.pb.gz"]
    found = [f for f in own if f.is_file()]
    if found:
        return found[0]
    try:
        return jax_trace.xplane_of(str(p))
    except TraceError:
        raise TraceError(f"{p}: the Chrome export of a JAX profile; give its *.xplane.pb (none beside it)") from None


def resolve(arg: str, rank: int | None = None) -> tuple[TraceKind, Path, list[str]]:
    """(the trace's kind, the file to read, notes on what was chosen) for a trace argument. A file is what
    its content says (:func:`files.kind`), whatever lies beside it; a folder is searched for traces."""
    p = Path(arg)
    notes: list[str] = []
    if p.is_file():
        if rank is not None:
            notes.append(f"--rank {rank}: {p.name} is one file, one rank; --rank picks among a folder's files")
        what = files.kind(p)
        if what == "xplane":
            return TraceKind.JAX, p, notes
        if what == "jax-chrome":  # JAX's own Chrome export: the profile beside it is the full record
            return TraceKind.JAX, _beside(p), notes
        if what == "chrome":
            return TraceKind.TORCH, p, notes
        files.check_readable(p)  # unreadable, corrupt, a truncated gzip: its own line (read through, not kept)
        raise TraceError(f"{arg}: not a trace (neither a torch.profiler Chrome trace, JSON, nor a JAX profile, "
                         "*.xplane.pb)")
    if p.is_dir():
        xplanes = sorted(p.rglob("*.xplane.pb"))
        if xplanes:
            runs = sorted({x.parent for x in xplanes})
            if len(runs) > 1:
                notes.append(f"{len(runs)} profiles under {arg}: the latest, {runs[-1].name}, read")
            found = sorted(runs[-1].glob("*.xplane.pb"))
            return TraceKind.JAX, _pick(found, rank, notes, "host"), notes
        chrome = sorted(f for f in p.rglob("*.json*") if f.name.endswith((".json", ".json.gz"))
                        and files.kind(f) == "chrome" and not doctor_timing.is_doctor_file(f)
                        and f.name != answer.NAME)  # the doctor's report beside its trace: not a trace
        if chrome:
            return TraceKind.TORCH, _pick(chrome, rank, notes, "rank"), notes
        raise TraceError(f"{arg}: no trace in this directory (*.xplane.pb, or torch *.json / *.json.gz)")
    if p.exists():
        raise TraceError(f"{arg}: not a regular file (a device or a pipe), not a trace")
    raise TraceError(f"{arg}: no such file")


def _pick(files: list[Path], rank: int | None, notes: list[str], what: str) -> Path:
    ranks = {_rank_of(f, i): f for i, f in enumerate(files)}
    if rank is not None and rank not in ranks:
        raise TraceError(f"no {what} {rank} among the {len(files)} trace files ({', '.join(map(str, sorted(ranks)))})")
    chosen = min(ranks) if rank is None else rank
    if len(files) > 1:
        notes.append(f"{len(files)} trace files (one per {what}): {what} {chosen} read (--rank N for another)")
    return ranks[chosen]


def hlo_text(hlo: str | None, trace: Path, module: str = "") -> tuple[str, str]:
    """(the compiled HLO text, where it came from): ``hlo`` (a file, or an ``--xla_dump_to`` directory: the
    ``*after_optimizations.txt`` of ``module``, the module the trace ran, else its largest), else a
    ``step.hlo.txt`` beside the profile, else none."""
    if hlo:
        h = Path(hlo)
        if h.is_dir():
            found = dumped_module(h, module)
            if found is None:
                raise TraceError(f"{hlo}: no *after_optimizations.txt (an --xla_dump_to directory?)")
            h = found
        return files.read_text(h, "HLO text"), str(h)
    beside = trace.parent / "step.hlo.txt"  # what twinbench writes beside a run's profile
    return (files.read_text(beside, "HLO text"), str(beside)) if beside.exists() else ("", "")


def read(arg: str, step_marker: str | None = None, rank: int | None = None, device: int | None = None,
         hlo: str | None = None, steps: Window = None) -> tuple[TraceKind, Path, Breakdown]:
    """(its kind, the file read, its breakdown) of any trace (``steps``: a window of its steps,
    :func:`steps.select`); :class:`TraceError` on bad input."""
    kind, path, notes = resolve(arg, rank)
    try:
        b = _read(kind, path, notes, step_marker, device, hlo, steps)
    except TraceError as e:  # every line names the file it is about
        raise (e if str(path) in str(e) or arg in str(e) else TraceError(f"{path}: {e}")) from None
    b.notes[:0] = notes
    return kind, path, b


def _read(kind: TraceKind, path: Path, notes: list[str], step_marker: str | None, device: int | None,
          hlo: str | None, steps: Window) -> Breakdown:
    if kind is TraceKind.TORCH:
        b = torch_trace.read(str(path), step_marker=step_marker, device=device, steps=steps)
    else:
        found: list[str] = []

        def hlo_for(module: str) -> str:  # the HLO of the module the trace's ops ran, once the trace is read
            text, where = hlo_text(hlo, path, module)
            found.append(where)
            return text

        b = jax_trace.read(str(path), step_marker=step_marker, device=device, hlo_for=hlo_for, steps=steps)
        if found and found[0]:
            notes.append(f"compiled HLO text: {found[0]}")
            b.hlo_path = found[0]
    return b
