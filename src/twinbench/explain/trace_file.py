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

import gzip
import re
from pathlib import Path

from twinbench.explain import jax_trace, torch_trace
from twinbench.explain.breakdown import Breakdown
from twinbench.explain.steps import TraceError

_RANK = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)


def is_trace(arg: str) -> bool:
    """Whether an explain argument names a trace (a path that exists) rather than a run."""
    return Path(arg).exists()


def _looks_like_chrome(path: Path) -> bool:
    try:
        with (gzip.open(path, "rb") if path.name.endswith(".gz") else path.open("rb")) as f:
            head = f.read(1 << 20)
    except (OSError, EOFError):
        return False
    return b"traceEvents" in head or head.lstrip()[:1] == b"["


def _rank_of(path: Path, i: int) -> int:
    m = _RANK.search(path.name)
    return int(m.group(1)) if m else i


def resolve(arg: str, rank: int | None = None) -> tuple[str, Path, list[str]]:
    """(``torch`` or ``jax``, the file to read, notes on what was chosen) for a trace argument."""
    p = Path(arg)
    notes: list[str] = []
    if p.is_file() and p.name.endswith((".xplane.pb", ".xplane.pb.gz")):
        return "jax", p, notes
    if p.is_file() and p.name.endswith((".json", ".json.gz")):
        if any(p.parent.glob("*.xplane.pb")):  # JAX's own json beside its profile: read the profile
            return "jax", jax_trace.xplane_of(str(p)), notes
        return "torch", p, notes  # the reader says so when it is not a Chrome trace
    if p.is_dir():
        xplanes = sorted(p.rglob("*.xplane.pb"))
        if xplanes:
            runs = sorted({x.parent for x in xplanes})
            if len(runs) > 1:
                notes.append(f"{len(runs)} profiles under {arg}: the latest, {runs[-1].name}, read")
            files = sorted(runs[-1].glob("*.xplane.pb"))
            return "jax", _pick(files, rank, notes, "host"), notes
        chrome = sorted(f for f in p.rglob("*.json*") if f.name.endswith((".json", ".json.gz"))
                        and _looks_like_chrome(f))
        if chrome:
            return "torch", _pick(chrome, rank, notes, "rank"), notes
        raise TraceError(f"{arg}: no trace in this directory (*.xplane.pb, or torch *.json / *.json.gz)")
    raise TraceError(f"{arg}: not a trace (neither a torch.profiler Chrome trace nor a JAX profile)")


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
            dumps = [f for f in h.rglob("*after_optimizations.txt")]
            if not dumps:
                raise TraceError(f"{hlo}: no *after_optimizations.txt (an --xla_dump_to directory?)")
            # module_0020.jit_train_step.cpu_after_optimizations.txt: the trace's module, its last compile
            named = sorted(f for f in dumps if module and f.name.split(".")[1:2] == [module])
            h = named[-1] if named else max(dumps, key=lambda f: f.stat().st_size)
        try:
            raw = h.read_bytes()
            return (gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw).decode(), str(h)
        except (OSError, UnicodeDecodeError, EOFError) as e:
            raise TraceError(f"{hlo}: not readable HLO text ({type(e).__name__})") from e
    beside = trace.parent / "step.hlo.txt"  # what twinbench writes beside a run's profile
    return (beside.read_text(), str(beside)) if beside.exists() else ("", "")


def read(arg: str, step_marker: str | None = None, rank: int | None = None, device: int | None = None,
         hlo: str | None = None) -> tuple[str, Path, Breakdown]:
    """(framework, the file read, its breakdown) of any trace; :class:`TraceError` on bad input."""
    kind, path, notes = resolve(arg, rank)
    if kind == "torch":
        b = torch_trace.read(str(path), step_marker=step_marker, device=device)
    else:
        found: list[str] = []

        def hlo_for(module: str) -> str:  # the HLO of the module the trace's ops ran, once the trace is read
            text, where = hlo_text(hlo, path, module)
            found.append(where)
            return text

        b = jax_trace.read(str(path), step_marker=step_marker, device=device, hlo_for=hlo_for)
        if found and found[0]:
            notes.append(f"compiled HLO text: {found[0]}")
            b.hlo_path = found[0]
    b.notes[:0] = notes
    return kind, path, b
