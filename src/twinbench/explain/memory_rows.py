"""The two runs' memory breakdowns side by side (the records' ``memory_breakdown``, measure/memory.py): one
row per part (runtime, params, optimizer state, gradients, activations, temporaries, inputs, unaccounted),
A bytes, B bytes, B-A and its share of the gap between the two peaks, as the time rows are."""

from __future__ import annotations

import msgspec

from twinbench.explain.side import Measured, MemoryGap, MemoryRow
from twinbench.measure.device import PROCESS_RSS

PARTS = ("runtime", "params", "optimizer_state", "gradients", "activations", "temporaries", "inputs")
MiB = 2**20


def measured(d: object) -> Measured | None:
    """A record's breakdown (as the record holds it: measure/memory.py's ``Breakdown.to_dict``) decoded into the
    part explain reads; None when there is none, or it has no parts."""
    if not d:
        return None
    m = msgspec.convert(d, Measured)
    return m if m.parts is not None else None


def rows(ma: Measured | None, mb: Measured | None) -> MemoryGap | None:
    """Each run's breakdown (a record's ``memory.breakdown``, :func:`measured`) side by side; None when either
    run has none (or only its error)."""
    if ma is None or mb is None or ma.parts is None or mb.parts is None:
        return None
    pa, pb = ma.parts, mb.parts
    gap = float(mb.peak_bytes - ma.peak_bytes)
    out = []
    names = [p for p in PARTS if p in pa or p in pb]
    names += [p for p in sorted(set(pa) | set(pb)) if p not in names]
    for p in [*names, "unaccounted"]:
        va = ma.unaccounted_bytes if p == "unaccounted" else pa.get(p, 0)
        vb = mb.unaccounted_bytes if p == "unaccounted" else pb.get(p, 0)
        out.append(MemoryRow(row=p, a_bytes=int(va), b_bytes=int(vb), diff_bytes=int(vb - va),
                             share=(vb - va) / gap if gap else 0.0))
    top = max(out, key=lambda r: (1 if gap >= 0 else -1) * r.diff_bytes)
    return MemoryGap(a_peak_bytes=ma.peak_bytes, b_peak_bytes=mb.peak_bytes, gap_bytes=int(gap),
                     a_source=ma.peak_source, b_source=mb.peak_source, rows=out, largest=top.row)


def sentence(m: MemoryGap, a_name: str, b_name: str) -> str:
    """The memory row of the summary: whose peak is higher, by how much, and its largest part."""
    gap = m.gap_bytes
    top = next(r for r in m.rows if r.row == m.largest)
    more, less = (b_name, a_name) if gap >= 0 else (a_name, b_name)
    src = m.a_source if m.a_source == m.b_source else f"{m.a_source} / {m.b_source}"
    out = (f"memory: {more}'s peak is {abs(gap) / MiB:.0f} MiB above {less}'s ({src}); the largest part of "
           f"it: {top.row} {top.diff_bytes / MiB:+.0f} MiB ({top.share:.0%})")
    more_source = m.b_source if gap >= 0 else m.a_source
    if top.row == "unaccounted" and more.startswith("jax/") and more_source == PROCESS_RSS:
        out += (" (a JAX run's peak RSS is often reached while XLA compiles, by the compiler's own memory: "
                "`--cache warm` measures a run that loads its programs instead of compiling them)")
    return out
