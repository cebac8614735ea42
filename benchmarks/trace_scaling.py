"""How `twinbench explain TRACE` scales with the trace's size: wall time, CPU-seconds and peak memory (RSS) of
one explain, in a fresh child process per size, against Kineto traces made long from a public fixture.

A long trace is the fixture's steps repeated: copy k of every event is shifted by k x the fixture's span in
time, its correlation, External id and flow ids by k x their range, its ``ProfilerStep#N`` renumbered N + k x
the fixture's steps; the host events of every copy come first, then the device events of every copy, as
kineto writes a trace (CPU ops, then GPU activities). Each long trace's per-step figures are compared with the
fixture's own (the same steps, repeated: the same figures within rounding).

    python benchmarks/trace_scaling.py                      # 45 MB, 230 MB, 1 GB and 2 GB from hta_nccl_data
    python benchmarks/trace_scaling.py --sizes-mb 100,500   # other sizes
    python benchmarks/trace_scaling.py --parsers            # ijson (yajl2_c) against msgspec on one trace

    python benchmarks/trace_scaling.py --xplane --sizes-mb 50,200   # TPU profiles (*.xplane.pb) alike

A long TPU profile (``--xplane``, from tpu_v5e_jax_jit_bf16) is its steps repeated the same way: the events of
the main module's executions but the last (the steps, start to start) copied with their offsets shifted by the
steps' span, so that copy k's first execution starts where copy k-1's last began; the last execution closes the
last step. Its per-step figures are its original's exactly.

Traces are written under --work (default a temporary folder, each trace removed once measured; in a --work
folder they are kept and reused by the next run) and read plain (not gzipped).
CPU-seconds are the figure to compare across runs on a busy machine; the load is printed with each row.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

FIX = Path(__file__).resolve().parent.parent / "tests" / "explain" / "fixtures"
DEVICE = {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation", "Memcpy", "Memset", "Kernel"}


def _source(name: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    raw = (FIX / name).read_bytes()
    data = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    return {k: v for k, v in data.items() if k != "traceEvents"}, data["traceEvents"]


def _shifts(events: list[dict[str, Any]]) -> dict[str, float]:
    """The strides a copy is shifted by: time, correlation, External id, flow id and step number."""
    timed = [e for e in events if "ts" in e and e.get("ph") != "M"]
    t0 = min(float(e["ts"]) for e in timed)
    t1 = max(float(e["ts"]) + float(e.get("dur") or 0) for e in timed)
    args = [e.get("args") or {} for e in events]
    corr = max((a.get("correlation") for a in args if isinstance(a.get("correlation"), int)), default=0)
    ext = max((a.get("External id") for a in args if isinstance(a.get("External id"), int)), default=0)
    flow = max((e["id"] for e in events if isinstance(e.get("id"), int)), default=0)
    steps = [int(e["name"].split("#")[1]) for e in events if str(e.get("name", "")).startswith("ProfilerStep#")]
    return {"time": (t1 - t0) * 1.001, "corr": corr + 1, "ext": ext + 1, "flow": flow + 1,
            "step": max(steps) - min(steps) + 1 if steps else 0}


def _copy(e: dict[str, Any], k: int, s: dict[str, float]) -> dict[str, Any]:
    e = dict(e)
    if "ts" in e:
        e["ts"] = round(float(e["ts"]) + k * s["time"], 3)
    if isinstance(e.get("id"), int):
        e["id"] += k * s["flow"]
    name = str(e.get("name", ""))
    if name.startswith("ProfilerStep#"):
        e["name"] = f"ProfilerStep#{int(name.split('#')[1]) + k * s['step']}"
    a = e.get("args")
    if isinstance(a, dict) and ("correlation" in a or "External id" in a):
        a = dict(a)
        if isinstance(a.get("correlation"), int):
            a["correlation"] += k * s["corr"]
        if isinstance(a.get("External id"), int):
            a["External id"] += k * s["ext"]
        e["args"] = a
    return e


def make_trace(source: str, dst: Path, size_mb: float) -> tuple[int, int]:
    """A trace of about ``size_mb`` MB from ``source``'s steps repeated; returns (copies, events)."""
    meta, events = _source(source)
    s = _shifts(events)
    per_copy = sum(len(json.dumps(e)) + 2 for e in events if e.get("ph") != "M")
    copies = max(1, round(size_mb * 1e6 / per_copy))
    host = [e for e in events if e.get("ph") != "M" and e.get("cat") not in DEVICE]
    device = [e for e in events if e.get("ph") != "M" and e.get("cat") in DEVICE]
    n = 0
    with dst.open("w") as f:
        f.write(json.dumps(meta)[:-1] + ', "traceEvents": [\n')
        first = True
        for e in (x for x in events if x.get("ph") == "M"):
            f.write(("" if first else ",\n") + json.dumps(e))
            first = False
        for group in (host, device):
            for k in range(copies):
                for e in group:
                    f.write(("" if first else ",\n") + json.dumps(_copy(e, k, s)))
                    first = False
                    n += 1
        f.write("\n]}\n")
    return copies, n


def _varint(v: int) -> bytes:
    v &= (1 << 64) - 1
    out = bytearray()
    while v >= 0x80:
        out.append(v & 0x7F | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def _field(num: int, payload: bytes) -> bytes:
    return _varint(num << 3 | 2) + _varint(len(payload)) + payload


def make_xplane(source: str, dst: Path, size_mb: float) -> tuple[int, int]:
    """A TPU profile of about ``size_mb`` MB from ``source``'s steps repeated (see the module doc); returns
    (copies, events)."""
    from twinbench.explain import xplane

    data = gzip.decompress((FIX / source).read_bytes())
    space = xplane.fields_of(data)
    tpu = next(v for n, _w, v in space if n == 1
               and any(m == 2 and x.startswith(b"/device:TPU:") for m, _w, x in xplane.fields_of(v)))
    plane = xplane.read(xplane.encode([(1, 2, tpu)]), keep_raw=True)[0]
    mods = next(ln for ln in plane.lines if ln.name == "XLA Modules")
    totals: dict[int, int] = {}
    for e in mods.events:
        totals[e.metadata_id] = totals.get(e.metadata_id, 0) + e.duration_ps
    main = max(totals, key=lambda m: totals[m])
    execs = sorted(mods.timestamp_ns * 1000 + e.offset_ps for e in mods.events if e.metadata_id == main)
    lo, hi = execs[0], execs[-1]  # the steps: first execution's start to the last's
    shift = hi - lo
    lines: list[tuple[list[tuple[int, int, Any]], list[tuple[bytes, int, bytes, int]], list[bytes]]] = []
    per_copy = 0
    for num, _wt, v in plane.raw:
        if num != 3:
            continue
        lf = xplane.fields_of(v)
        base = next((x for n, _w, x in lf if n == 3), 0) * 1000
        inside, last = [], []  # events of the steps (prefix, offset, rest); those from the last execution on
        for n, _w, x in lf:
            if n != 4:
                continue
            ef = xplane.fields_of(x)
            off = next((y for m, _w, y in ef if m == 2), 0)
            if lo <= base + off < hi:
                inside.append((xplane.encode([f for f in ef if f[0] < 2]), off,
                               xplane.encode([f for f in ef if f[0] > 2]), len(x) + 3))
                per_copy += len(x) + 3
            elif base + off >= hi:
                last.append(x)
        lines.append(([f for f in lf if f[0] != 4], inside, last))
    copies = max(1, round(size_mb * 1e6 / max(per_copy, 1)))
    n = 0
    out_lines = []
    for head, inside, last in lines:
        body = bytearray(xplane.encode(head))
        for k in range(copies):
            for pre, off, rest, _ in inside:
                body += _field(4, pre + b"\x10" + _varint(off + k * shift) + rest)
                n += 1
        for x in last:  # the last execution, moved after the copies
            ef = xplane.fields_of(x)
            body += _field(4, xplane.encode([(m, w, y + (copies - 1) * shift if m == 2 else y) for m, w, y in ef]))
            n += 1
        out_lines.append(bytes(body))
    fields = []
    put = False
    for num, wt, v in plane.raw:
        if num == 3:
            if not put:
                fields.extend((3, 2, b) for b in out_lines)
                put = True
            continue
        fields.append((num, wt, v))
    dst.write_bytes(xplane.encode([(1, 2, xplane.encode(fields))]))
    return copies, n


def _made(path: Path) -> Path:
    """The sidecar saying what a kept trace was made from."""
    return path.with_name(path.name + ".made.json")


def _trace(source: str, work: Path, mb: float, reuse: bool) -> tuple[Path, int]:
    """(the trace of ``mb`` MB made from ``source`` in ``work``, its events); with ``reuse``, one a --work
    folder kept from an earlier run (a sidecar says what it was made from)."""
    xp = source.endswith(".xplane.pb.gz")
    path = work / (f"trace_{mb:.0f}mb.xplane.pb" if xp else f"trace_{mb:.0f}mb.json")
    made = _made(path)
    if reuse and path.exists() and made.exists() and json.loads(made.read_text()).get("source") == source:
        return path, json.loads(made.read_text())["events"]
    copies, events = (make_xplane if xp else make_trace)(source, path, mb)
    made.write_text(json.dumps({"source": source, "copies": copies, "events": events}))
    return path, events


CHILD = r"""
import json, sys
from twinbench.explain import gap
e = gap.explain_trace(sys.argv[1])
print(json.dumps({k: e[k] for k in ("step_ms", "steps_traced", "steps_used", "cells", "step_spread_ms")}))
"""


def run_one(path: Path, code: str = CHILD) -> dict[str, Any]:
    """One explain of ``path`` (``code`` run on it) in a fresh interpreter: wall, CPU-seconds (user + sys) and
    peak RSS of that interpreter alone (a wrapper process waits for it and reads its RUSAGE_CHILDREN: the
    largest child so far, so each size gets its own wrapper)."""
    wrapper = (
        "import os, resource, subprocess, sys, json, time\n"
        "t = time.perf_counter()\n"
        "p = subprocess.run([sys.executable, '-c', sys.argv[1], sys.argv[2]], capture_output=True, text=True)\n"
        "wall = time.perf_counter() - t\n"
        "ru = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
        "print(json.dumps({'rc': p.returncode, 'err': p.stderr[-400:], 'out': p.stdout.strip().splitlines()[-1:],"
        " 'wall_s': wall, 'cpu_s': ru.ru_utime + ru.ru_stime, 'rss_gib': ru.ru_maxrss / 2**20}))\n"
    )
    load = os.getloadavg()[0]
    r = subprocess.run([sys.executable, "-c", wrapper, code, str(path)], capture_output=True, text=True, check=True)
    res = json.loads(r.stdout)
    if res["rc"]:
        raise SystemExit(f"explain of {path} failed: {res['err']}")
    res["load"] = load
    res["out"] = json.loads(res["out"][0]) if res["out"] else {}
    return res


def _max_cell_diff(a: dict[str, Any], b: dict[str, Any]) -> float:
    """The largest difference (ms per step) between two explains' phase x category cells."""
    keys = {(p, c) for side in (a, b) for p, row in side["cells"].items() for c in row}
    return max((abs(a["cells"].get(p, {}).get(c, 0.0) - b["cells"].get(p, {}).get(c, 0.0)) for p, c in keys),
               default=0.0)


PARSERS = {
    "ijson (yajl2_c), streamed": r"""
import sys, ijson
n = 0
with open(sys.argv[1], "rb") as f:
    for e in ijson.items(f, "traceEvents.item", use_float=True):
        n += e.get("ph") == "X"
print('{"events": %d}' % n)
""",
    "msgspec, whole file": r"""
import sys, msgspec
from typing import Any
class Ev(msgspec.Struct):
    ph: str = ""
    cat: str = ""
    name: Any = ""
    ts: Any = None
    dur: Any = None
    tid: Any = None
    pid: Any = None
    args: Any = None
class Trace(msgspec.Struct):
    traceEvents: list[Ev] = []
with open(sys.argv[1], "rb") as f:
    t = msgspec.json.decode(f.read(), type=Trace)
print('{"events": %d}' % sum(e.ph == "X" for e in t.traceEvents))
""",
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", default=None, help="a fixture in tests/explain/fixtures (default hta_nccl_data.json.gz;"
                    " with --xplane, tpu_v5e_jax_jit_bf16.xplane.pb.gz)")
    ap.add_argument("--xplane", action="store_true", help="long TPU profiles (*.xplane.pb) rather than Kineto JSON")
    ap.add_argument("--sizes-mb", default="45,230,1000,2000", help="trace sizes to make, MB")
    ap.add_argument("--work", default=None, help="where the traces are written (default: a temporary folder)")
    ap.add_argument("--parsers", action="store_true", help="time the JSON parsers alone on the first size")
    a = ap.parse_args()
    a.source = a.source or ("tpu_v5e_jax_jit_bf16.xplane.pb.gz" if a.xplane else "hta_nccl_data.json.gz")
    work = Path(a.work or tempfile.mkdtemp(prefix="trace_scaling_"))
    work.mkdir(parents=True, exist_ok=True)
    sizes = [float(s) for s in a.sizes_mb.split(",")]
    print(f"source {a.source}; {os.cpu_count()} cores; python {sys.version.split()[0]}")
    if a.parsers:
        path, _ = _trace(a.source, work, sizes[0], reuse=bool(a.work))
        print("| parser | trace MB | wall s | CPU s | peak RSS GiB | load |")
        print("|---|---:|---:|---:|---:|---:|")
        for name, code in PARSERS.items():
            r = run_one(path, code)
            print(f"| {name} | {path.stat().st_size / 1e6:.0f} | {r['wall_s']:.1f} | {r['cpu_s']:.1f} | "
                  f"{r['rss_gib']:.2f} | {r['load']:.1f} |", flush=True)
        return
    orig = run_one(FIX / a.source)["out"]
    print(f"original: {orig['steps_traced']} steps, {orig['step_ms']:.2f} ms per step")
    print("| trace MB | events M | steps | wall s | CPU s | peak RSS GiB | RSS / file | step ms | max cell diff ms "
          "| load |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for mb in sizes:
        path, events = _trace(a.source, work, mb, reuse=bool(a.work))
        size = path.stat().st_size
        r = run_one(path)
        out = r["out"]
        print(f"| {size / 1e6:.0f} | {events / 1e6:.2f} | {out['steps_traced']} | {r['wall_s']:.1f} | "
              f"{r['cpu_s']:.1f} | {r['rss_gib']:.2f} | {r['rss_gib'] * 2**30 / size:.2f} | {out['step_ms']:.2f} | "
              f"{_max_cell_diff(out, orig):.3f} | {r['load']:.1f} |", flush=True)
        if not a.work:
            path.unlink()
            _made(path).unlink()


if __name__ == "__main__":
    main()
