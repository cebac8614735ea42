"""A results folder (and a file) read as data, every class of docs/bad-input.md run as a user would, and checked.

Each case is a fresh ``twinbench`` process (``hostile_inputs.run_case``: a time limit, its peak resident memory
from ``wait4``) on an input built under a temporary folder: settings that name code and paths, links out of the
folder, a 2 GB sparse results file and HLO text, 10 MB and 100 MB op names, variants, endless timeouts, models
whose check fails, interrupts, another protobuf named ``*.xplane.pb``, stdout on a full device, escape codes,
broken and misshapen checkpoints, a locked ``--out``, a run stopped by its timeout. A case is ``ok`` when it ended
as the docs promise: exit 2 with one ``error:`` line naming the input (or its own expected code), no traceback,
no escape code printed, within its memory bound (1 GB for the 2 GB files) and output (an op name is cut), and
nothing written or imported outside the folders the command was told to write (every file under the temporary
folder is compared before and after, a planted module leaves a marker if imported).

    PYTHONPATH=src python benchmarks/hostile_folder.py [--only explain,doctor] [--markdown FILE] [--json FILE]

It exits 1 when a case is not as promised (a reproducer: run it after changing a command). A few cases start
real tiny runs (the interrupted explain, the run stopped by its timeout), so the whole takes minutes.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import hostile_inputs
from hostile_inputs import (
    ROOT,
    Case,
    _export,
    folder_cases,
    record,
    results,
    run_case,
    steps,
    torch_trace,
)

from twinbench.record import read_jsonl

FIX = ROOT / "tests" / "explain" / "fixtures"
RO = "/sys/twinbench-hostile"  # a place no one may write, root included
GB2 = 2 * 2**30


def _sparse(path: Path, size: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.truncate(size)  # every byte reads as NUL, none takes disk
    return path


def _named_op(path: Path, mb: int) -> Path:
    """A trace whose second op has a name of ``mb`` MB, written in pieces (this process never holds it: a command's
    peak memory, read from wait4, starts from what its parent held when it forked)."""
    ev = steps(n=4)
    ev[5]["name"] = "@NAME@"
    head, tail = torch_trace(ev).split(b"@NAME@")
    with open(path, "wb") as f:
        f.write(head)
        for _ in range(mb):
            f.write(b"x" * 2**20)
        f.write(tail)
    return path


def _snapshot(t: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``t``: (size, mtime in ns), links not followed."""
    seen = {}
    for root, dirs, names in os.walk(t):
        for n in names + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
            p = os.path.join(root, n)
            st = os.lstat(p)
            seen[p] = (st.st_size, st.st_mtime_ns)
    return seen


def _written(before: dict, after: dict, allowed: list[str]) -> str:
    """Files created, changed or removed under the folder outside ``allowed`` (the places the command names)."""
    changed = sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p)
                     and not any(p == a or p.startswith(a.rstrip("/") + "/") for a in allowed))
    return f"wrote outside its folders: {', '.join(changed[:3])}" if changed else ""


def _allowed(c: Case) -> list[str]:
    """The places a case's command is told to write: --out, --json, --resume, a folder report draws into."""
    a = c.args
    named = [a[i + 1] for i, x in enumerate(a[:-1]) if x in ("--out", "--json", "--resume", "--trace") and a[i + 1]]
    if a and a[0] == "report":
        named.append(a[1])
    return named


def more_cases(t: Path) -> tuple[list[Case], Callable[[], str]]:
    """The classes folder_cases leaves out, every one of the hostile trial's and its lesser list; and the check
    that no planted module was imported."""
    m = t / "more"
    m.mkdir()
    marker = m / "IMPORTED"
    out = str(m / "o")
    pair = results(m / "pair", [record("torch", "eager"), record("jax", "jit")])
    big_hlo = _sparse(m / "big.hlo.txt", GB2)
    name10, name100 = _named_op(m / "name10.json", 10), _named_op(m / "name100.json", 100)
    xplane_pb = m / "run.xplane.pb"
    xplane_pb.write_bytes(b"\x08\x96\x01\x12\x04name")  # a valid protobuf message, not an XSpace
    escapes = results(m / "escapes", [record("torch", "eager", device="\x1b[2J\x1b[31mcpu\nerror: spoofed"),
                                      record("jax", "jit")])
    ev = steps(n=4)
    ev[5]["name"] = "\x1b[31maten::mm\rerror: spoofed"
    esc_trace = m / "escapes.json"
    esc_trace.write_bytes(torch_trace(ev))
    zero = results(m / "zero", [record("torch", "eager", weights_path="/dev/zero")])
    ck = m / "ck"
    _export(ck)
    truncated = m / "truncated"
    truncated.mkdir()
    (truncated / "config.json").write_text((ck / "config.json").read_text())
    st = (ck / "model.safetensors").read_bytes()
    (truncated / "model.safetensors").write_bytes(st[: len(st) // 2])
    misshapen = _misshapen(ck, m / "misshapen")
    text = m / "text.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 40)
    importing = m / "importing.py"
    importing.write_text("import no_such_module\n")  # named on the command line: importing it is the check
    wrong = m / "wrong.py"
    wrong.write_text("def build(cfg=None):\n    return 'not a module'\n")
    hangs = m / "hangs.py"
    hangs.write_text("import time\ntime.sleep(600)\n")
    only_list, only_obj = _settings(m, "only-list", {"only": ["C1"]}), _settings(m, "only-obj", {"only": {}})
    script = m / "train.py"
    script.write_text("print('a script')\n")
    locked = m / "locked"
    locked.mkdir()

    def imported() -> str:
        return "imported a file it was only to read" if marker.exists() else ""

    def n_params_recorded() -> str:
        f = Path(out) / "results.jsonl"
        recs = read_jsonl(f)  # the flat view of each record, whatever its layout
        return "" if recs and all(isinstance(r.get("n_params"), int) and r["n_params"] > 0 for r in recs) else \
            f"a record without n_params ({[r.get('n_params') for r in recs]})"

    def no_out() -> str:
        return "--out created" if Path(out).exists() else ""

    ex = ["explain", f"{pair}:torch/eager", f"{pair}:jax/jit", "--out", out]
    tiny = ["--preset", "tiny"]
    return [
        Case("explain", "TRACE --hlo a 2 GB sparse file", ["explain", str(FIX / "pair_lm_jax.xplane.pb.gz"), "--hlo",
                                                          str(big_hlo)], max_mb=1024),
        Case("explain", "a 10 MB op name", ["explain", str(name10)], 0, max_mb=1024, max_output=5000),
        Case("explain", "a 100 MB op name", ["explain", str(name100)], max_mb=1024, max_output=5000),
        Case("explain", "--try B:threads=-3", [*ex, "--try", "B:threads=-3"]),
        *[Case("predict", f"--strategies {s}", ["predict", *tiny, "--strategies", s, "--device", dev])
          for s, dev in (("jax:mesh-dp", "tpu-v5e"), ("jax:mesh-fsdp", "tpu-v5e"), ("jax:naive", "tpu-v5e"),
                         ("torch:ddp", "h200"))],
        Case("doctor", "--steps 5 --trace DIR", ["doctor", str(script), "--steps", "5", "--trace", str(m / "tr")],
             check=lambda: "--trace folder made" if (m / "tr").exists() else ""),
        *[Case(cmd[0], f"--timeout {v}", [*cmd, "--timeout", v]) for v in ("inf", "1e308") for cmd in (
            ["sweep", *tiny, "--over", "batch=1,2", "--strategies", "torch:eager", "--out", out],
            ["advise", *tiny, "--out", out], ["score", "--init-from", str(ck), "--data", str(text)],
            ["predict", "--device", "tpu-v5e", "--model", f"{wrong}:build"])],
        Case("claims", "--model that fails to import", ["claims", "--quick", "--only", "C6", "--model",
                                                        f"{importing}:build", "--out", out, "--timeout", "60"], check=no_out),
        Case("claims", "--model returning a str", ["claims", "--quick", "--only", "C6", "--model", f"{wrong}:build",
                                                   "--out", out, "--timeout", "60"], check=no_out),
        Case("claims", "--model that hangs at import, --timeout 5",
             ["claims", "--quick", "--only", "C6", "--model", f"{hangs}:build", "--out", out, "--timeout", "5"], check=no_out),
        Case("claims", "--resume: only a list (--plan)", ["claims", "--resume", str(only_list), "--plan"]),
        Case("claims", "--resume: only an object", ["claims", "--resume", str(only_obj), "--plan"]),
        # runs long enough (--steps 1500) that the signal at 12 s lands inside them on a quiet machine too
        Case("explain", "SIGTERM during its own runs",
             ["explain", "torch:eager", "jax:jit", *tiny, "--steps", "1500", "--out", out], 130, sigterm_after=12.0),
        Case("explain", "another protobuf named *.xplane.pb", ["explain", str(xplane_pb)]),
        Case("strategies", "stdout on a full device", ["strategies"], stdout="/dev/full"),
        Case("report", "escape codes in a record's field", ["report", str(escapes)], 0),
        Case("explain", "escape codes in a trace's op name", ["explain", str(esc_trace)], 0),
        Case("export", "--from a record naming /dev/zero", ["export", "--from", str(zero), "--out", out],
             check=no_out),
        Case("score", "a truncated checkpoint", ["score", "--init-from", str(truncated), "--data", str(text)]),
        Case("score", "a tensor of another shape", ["score", "--init-from", str(misshapen), "--data", str(text)]),
        Case("compare", "--init-from a tensor of another shape",
             ["compare", "--init-from", str(misshapen), "--strategies", "torch:eager,jax:jit", "--out", out],
             check=no_out),
        Case("claims", "--trace in a read-only place", ["claims", "--quick", "--only", "C1", "--trace", RO, "--out",
                                                        out], check=no_out),
        Case("claims", "probes only, --out locked by another twinbench",
             ["claims", "--quick", "--only", "C21", "--out", str(locked)], check=_locker(locked)),
        Case("compare", "a run stopped by --timeout before it started",
             ["compare", *tiny, "--strategies", "torch:eager", "--timeout", "0.5", "--out", out], 1,
             check=n_params_recorded),
    ], imported


def bound_cases(t: Path) -> list[Case]:
    """A case per hole found by the last hostile trial: counts no host can keep, FIFOs where twinbench opens a lock or a --json,
    31 million lines that are not records, a link past 60,000 entries where the profiler writes, 256 KB of
    gzipped zeros named as a profile, a record that names the file to train on."""
    import gzip

    from twinbench.spec import from_preset

    m = t / "bounds"
    m.mkdir()
    out = str(m / "o")
    fifo_out = m / "fifo-out"
    fifo_out.mkdir()
    os.mkfifo(fifo_out / ".twinbench.lock")
    results(fifo_out, [record("torch", "eager")])
    (fifo_out / "claims-settings.json").write_text(json.dumps({"quick": True, "only": "C1"}))
    fifo_json = m / "out.json"
    os.mkfifo(fifo_json)
    pair = results(m / "pair", [record("torch", "eager"), record("jax", "jit")])
    bad = m / "bad"
    bad.mkdir()
    with open(bad / "results.jsonl", "w") as f:  # 60 MB, under the 256 MB cap: 31 million lines, none a record
        f.write(json.dumps(record("torch", "eager")) + "\n")
        for _ in range(31):
            f.write("x\n" * 1_000_000)
    traces, away = m / "traces", m / "away"
    traces.mkdir()
    away.mkdir()
    for i in range(60_000):
        (traces / f"f{i:05d}").touch()
    spec = from_preset("tiny", {"steps": 12, "warmup": 2}, framework="torch", strategy="eager")
    (traces / f"torch-eager-{spec.run_id()}").symlink_to(away)  # where the profiler writes this run's trace
    zeros = m / "zeros.xplane.pb.gz"
    zeros.write_bytes(gzip.compress(bytes(256 << 10)))
    shadow = results(m / "shadow", [record("torch", "eager"), record("jax", "jit")])
    for line_rec in (shadow / "results.jsonl",):
        recs = [json.loads(x) for x in line_rec.read_text().splitlines()]
        for r in recs:
            r["spec"]["train"]["data"] = "/etc/hostname"
        line_rec.write_text("".join(json.dumps(r) + "\n" for r in recs))
    base = ["--preset", "tiny", "--strategies", "torch:eager"]
    zeros2g = _gzip_zeros(m / "zeros2g.xplane.pb.gz", GB2)  # 2 MB of gzip inflating to the 2 GiB cap
    zeros2g_json = m / "zeros2g.json.gz"
    zeros2g_json.symlink_to(zeros2g.name)  # the same bytes named as a torch trace (a link the user names: theirs)
    big = _sparse(m / "big8g.txt", 4 * GB2)
    ck = m / "ck"
    _export(ck)
    eight, init = (_planted(m / name, field, value) for name, field, value in (
        ("eight", "data", str(big)), ("init", "init_from", str(ck))))
    out_e, traces_e = m / "out-explain", m / "out-explain" / "traces"
    traces_e.mkdir(parents=True)
    for i in range(60_000):
        (traces_e / f"f{i:05d}").touch()
    away_e = m / "away-explain"
    away_e.mkdir()
    (traces_e / f"torch-eager-{spec.run_id()}").symlink_to(away_e)  # where --explain's profiler writes
    new_out = m / "new" / "deeper"

    def away_empty() -> str:
        return f"wrote through the link: {sorted(p.name for p in away.iterdir())}" if any(away.iterdir()) else ""

    def away_e_empty() -> str:
        return f"wrote through the link: {sorted(p.name for p in away_e.iterdir())}" if any(away_e.iterdir()) else ""

    def new_out_made() -> str:
        return "" if (new_out / "results.jsonl").is_file() else "--out NEWDIR holds no results.jsonl"

    cases = [
        Case("compare", "--steps 1e30", ["compare", *base, "--steps", str(10**30), "--out", out], max_mb=500),
        Case("compare", "--repeats 1e9 --dry-run", ["compare", *base, "--repeats", str(10**9), "--dry-run"],
             max_mb=500),
        Case("compare", "--preset gpt2-124m --steps 700000 (planned)", ["compare", "--preset", "gpt2-124m",
             "--strategies", "torch:eager", "--steps", "700000", "--dry-run"], 0, max_mb=500),
        Case("sweep", "a grid of 4 million points", ["sweep", *base, "--over", "seed=" + ",".join(map(str, range(2000))),
             "--over", "steps=" + ",".join(map(str, range(10, 2010))), "--out", out], max_mb=500),
        Case("compare", "--out with a FIFO for its lock", ["compare", *base, "--out", str(fifo_out)], max_mb=500),
        Case("compare", "--resume with a FIFO for its lock", ["compare", *base, "--resume", str(fifo_out)],
             max_mb=500),
        Case("claims", "--resume with a FIFO for its lock", ["claims", "--resume", str(fifo_out)], max_mb=500),
        Case("diff", "--json a FIFO", ["diff", str(pair), str(pair), "--json", str(fifo_json)], max_mb=500),
        Case("explain", "--json a FIFO", ["explain", str(FIX / "pair_lm_jax.xplane.pb.gz"), "--json",
                                          str(fifo_json)], max_mb=500),
        Case("diff", "31 million lines that are not records (60 MB)", ["diff", str(bad), str(bad)], max_mb=500),
        Case("compare", "--trace: a link past 60,000 entries where the profiler writes",
             ["compare", *base, "--steps", "12", "--warmup", "2", "--trace", str(traces), "--out", out], 0,
             check=away_empty),
        Case("explain", "256 KB of gzipped zeros as a profile", ["explain", str(zeros)], max_mb=500),
        Case("explain", "a record naming /etc/hostname as its data",
             [*["explain", f"{shadow}:torch/eager", f"{shadow}:jax/jit"], "--out", out], max_mb=500),
        # the rest of each hole as the last hostile trial named it: the counts through sweep and explain's run mode, a FIFO
        # lock for sweep --resume, the bad lines for predict --calibrate, 2 GiB of gzipped zeros (as a profile and
        # as a torch trace), a record naming an 8 GB file or a checkpoint, --explain's traces past 60,000 entries,
        # --try with a new --out
        Case("compare", "--repeats 1e9", ["compare", *base, "--repeats", str(10**9), "--out", out], max_mb=500),
        Case("sweep", "--steps 1e30", ["sweep", *base, "--over", "batch=1,2", "--steps", str(10**30), "--out", out],
             max_mb=500),
        Case("sweep", "--over steps=1e30", ["sweep", *base, "--over", f"steps=10,{10**30}", "--out", out],
             max_mb=500),
        Case("explain", "run mode --steps 1e30", ["explain", "torch:eager", "jax:jit", "--preset", "tiny", "--steps",
                                                 str(10**30), "--out", out], max_mb=500),
        Case("sweep", "--resume with a FIFO for its lock", ["sweep", *base, "--over", "batch=1,2", "--resume",
                                                            str(fifo_out)], max_mb=500),
        Case("predict", "--calibrate 31 million lines that are not records",
             ["predict", "--preset", "tiny", "--device", "h100", "--calibrate", str(bad / "results.jsonl")],
             max_mb=500),
        Case("explain", "2 MB of gzip inflating to 2 GiB as a profile", ["explain", str(zeros2g)], max_mb=500),
        Case("explain", "2 MB of gzip inflating to 2 GiB as a torch trace", ["explain", str(zeros2g_json)],
             max_mb=500),
        Case("explain", "a record naming an 8 GB file as its data",
             ["explain", f"{eight}:torch/eager", f"{eight}:jax/jit", "--out", out], max_mb=500),
        Case("explain", "a record naming a checkpoint to start from",
             ["explain", f"{init}:torch/eager", f"{init}:jax/jit", "--out", out], max_mb=500),
        Case("compare", "--explain: a link past 60,000 entries where the profiler writes",
             ["compare", *base, "--steps", "12", "--warmup", "2", "--explain", "--out", str(out_e)],
             check=away_e_empty),  # the run's own trace folder is opened (and refused) before any run
        Case("explain", "--try with an --out that does not exist yet",
             ["explain", f"{pair}:torch/eager", f"{pair}:jax/jit", "--try", "B:lr=0.002", "--out", str(new_out)], 0,
             check=new_out_made),
    ]
    for c in cases:  # a refusal is one line within 10 s (the interpreter's start included)
        c.max_s = c.max_s or (REFUSED_S if c.expect == 2 else 0)
    return cases


def lesser_cases(t: Path) -> list[Case]:
    """A case per lesser defect of the last hostile trial, as it named them: side files of the wrong type,
    mathtext labels and a 400-digit --plan-steps, JSON 100,000 deep in a checkpoint, safetensors headers the model's
    mapping ignores, a record's text spoofing an ``error:`` line, newer schema versions, the flag blamed, absurd
    values, a null explain.timing. Each ends in one line (exit 2) or is read (exit 0), with no traceback."""
    m = t / "lesser"
    m.mkdir()
    out = str(m / "o")
    n = [0]

    def folder(recs: list[dict], side: tuple[str, str] | None = None) -> Path:
        n[0] += 1
        d = results(m / f"r{n[0]}", recs)
        if side:
            (d / side[0]).write_text(side[1])
        return d

    def two(**torch: object) -> list[dict]:
        return [{**record("torch", "eager"), **torch}, record("jax", "jit")]

    text = m / "text.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 40)
    ck = m / "ck"
    _export(ck)
    deep = "[" * 100_000 + "]" * 100_000

    def checkpoint(name: str, change: Callable[[Path], None]) -> Path:
        d = m / name
        shutil.copytree(ck, d)
        change(d)
        return d

    def header(d: Path, edit: Callable[[dict], object] | None = None, raw: bytes = b"") -> None:
        blob = (d / "model.safetensors").read_bytes()
        size = int.from_bytes(blob[:8], "little")
        h = json.loads(blob[8:8 + size])
        if edit:
            edit(h)
        new = raw or json.dumps(h).encode()
        (d / "model.safetensors").write_bytes(len(new).to_bytes(8, "little") + new + blob[8 + size:])

    def index_deep(d: Path) -> None:
        (d / "model.safetensors").unlink()
        (d / "model.safetensors.index.json").write_text(deep)

    def config(d: Path, **over: object) -> None:
        cfg = json.loads((d / "config.json").read_text())
        cfg.update(over)
        (d / "config.json").write_text(json.dumps(cfg))

    spoof = "cpu\nerror: spoofed"
    calib = m / "calib.jsonl"
    calib.write_text(json.dumps(record("torch", "eager", preset="x\nerror: spoofed")) + "\n")
    named = m / "a\x1b[31mb\nerror: spoofed.json"
    named.write_text("x")
    newer = [record("torch", "eager", schema_version=3), record("jax", "jit", schema_version=int("9" * 400))]
    null_timing = two()
    null_timing[0]["explain_timing"] = None
    settings = m / "settings"
    settings.mkdir()
    (settings / "claims-settings.json").write_text(json.dumps({"quick": True, "only": "C1", "device": "xyz"}))
    score = ["score", "--data", str(text), "--init-from"]
    cases = [
        *[Case("report", f"{name} {content}", ["report", str(folder(two(), (name, content)))])
          for name, content in (("claims.json", '[{"claim": "C1", "verdict": " ", "runs": 5}]'),
                                ("advice.json", '{"plan_steps": "abc"}'), ("advice.json", '{"plan_steps": 1e400}'),
                                ("advice.json", '{"plan_steps": [1]}'), ("advice.json", '{"recommendation": "x"}'))],
        Case("report", "a strategy named $x^$ (mathtext)", ["report", str(folder(two(strategy="eager$x^$")))], 0),
        Case("report", "--plan-steps 10^400", ["report", str(folder(two())), "--plan-steps", "1" + "0" * 400]),
        *[Case("score", f"JSON 100,000 deep in the {where}", [*score, str(checkpoint(f"deep-{where}", change))])
          for where, change in (("safetensors header", lambda d: header(d, raw=deep.encode())),
                                ("config.json", lambda d: (d / "config.json").write_text(deep)),
                                ("index file", index_deep))],
        Case("compare", "--init-from a config.json 100,000 deep",
             ["compare", "--init-from", str(m / "deep-config.json"), "--strategies", "torch:eager", "--out", out]),
        *[Case("score", f"a safetensors header with {what}", [*score, str(checkpoint(name, lambda d, e=edit: header(d, e)))])
          for name, what, edit in (
              ("past-end", "a tensor the model ignores past the end of the file",
               lambda h: h.update(extra={"dtype": "F32", "shape": [4], "data_offsets": [10**12, 10**12 + 16]})),
              ("overlap", "overlapping offsets",
               lambda h: h.update(extra={"dtype": "F32", "shape": [4], "data_offsets": [0, 16]})),
              ("meta-list", "a list __metadata__", lambda h: h.update(__metadata__=["format", "pt"])))],
        Case("diff", "a record's device spoofing an error: line", ["diff", str(folder(two(device=spoof))),
                                                                   str(folder(two()))], 0, forbid="error: spoofed"),
        Case("diff", "a record's device with U+2028 and bidi marks",
             ["diff", str(folder(two(device="cpu\u2028error: spoofed\u202e"))), str(folder(two()))], 0,
             forbid="error: spoofed"),
        Case("predict", "--calibrate a record whose left-out reason spoofs an error: line",
             ["predict", "--preset", "tiny", "--device", "h100", "--calibrate", str(calib)], forbid="error: spoofed"),
        Case("explain", "a trace file named with escape codes and a newline", ["explain", str(named)],
             forbid="error: spoofed"),
        Case("report", "records of schema_version 3 and 400 digits", ["report", str(folder(newer))], 0,
             want="newer twinbench"),
        # the device to plan for is the command line's only: one planted in the settings is not read, so not blamed
        Case("claims", "--resume: settings naming an unknown device", ["claims", "--resume", str(settings), "--plan"],
             0, forbid="error: --device"),
        Case("predict", "--strategies ''", ["predict", "--preset", "tiny", "--device", "h100", "--strategies", ""],
             want="--strategies"),
        Case("predict", "--devices 1e30", ["predict", "--preset", "tiny", "--device", "h100", "--devices",
                                           str(10**30)]),
        Case("compare", "--lr 1e308", ["compare", "--preset", "tiny", "--strategies", "torch:eager", "--lr", "1e308",
                                       "--out", out]),
        Case("compare", "--out ''", ["compare", "--preset", "tiny", "--strategies", "torch:eager", "--out", ""]),
        Case("score", "a config's n_embd 1e308", [*score, str(checkpoint("n-embd", lambda d: config(d, n_embd=1e308)))],
             max_output=1000),
        Case("report", "a record's explain.timing null", ["report", str(folder(null_timing))], 0),
    ]
    for c in cases:  # a refusal is one line within 10 s; a folder read whole (exit 0) is bounded in memory only
        c.max_mb, c.max_s = 500, REFUSED_S if c.expect == 2 else 0
    return cases


#: the seconds a refusal may take (the bound of bad-input.md's trial, interpreter start and imports included)
REFUSED_S = 10.0


def _gzip_zeros(path: Path, size: int) -> Path:
    """A gzip file of ``size`` zero bytes, written in pieces (this process never holds them)."""
    import zlib

    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    chunk = bytes(64 << 20)
    with open(path, "wb") as f:
        for _ in range(size // len(chunk)):
            f.write(z.compress(chunk))
        f.write(z.flush())
    return path


def _planted(d: Path, field: str, value: str) -> Path:
    """A results folder of a torch and a JAX record whose spec names ``value`` as its train section's ``field``."""
    results(d, [record("torch", "eager"), record("jax", "jit")])
    recs = [json.loads(x) for x in (d / "results.jsonl").read_text().splitlines()]
    for r in recs:
        r["spec"]["train"][field] = value
    (d / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    return d


def _settings(m: Path, name: str, value: object) -> Path:
    d = m / name
    d.mkdir()
    (d / "claims-settings.json").write_text(json.dumps(value))
    return d


def _misshapen(ck: Path, to: Path) -> Path:
    """``ck`` with one tensor a row short (a whole, valid safetensors file whose shape is not its config's)."""
    from safetensors.numpy import load_file, save_file

    to.mkdir()
    (to / "config.json").write_text((ck / "config.json").read_text())
    t = dict(load_file(str(ck / "model.safetensors")))
    t["transformer.wpe.weight"] = t["transformer.wpe.weight"][:-1].copy()
    save_file(t, str(to / "model.safetensors"), metadata={"format": "pt"})
    return to


_HELD: list = []


def _locker(out: Path) -> Callable[[], str]:
    """The lock another twinbench holds on ``out`` (runner.out_lock's file, flock'd here), taken when the case is
    built and kept while it runs; the check says whether the probes wrote anything."""
    f = open(out / ".twinbench.lock", "a")  # noqa: SIM115 - held while the case runs
    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    _HELD.append(f)
    return lambda: "wrote into a locked --out" if {p.name for p in out.iterdir()} - {".twinbench.lock"} else ""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", default="", help="comma-separated commands (explain,predict,...); default: all")
    p.add_argument("--groups", default="folder,more,bounds,lesser",
                   help="comma-separated groups of cases: folder, more, bounds (the last hostile trial's holes), "
                        "lesser (its lesser defects); default: all")
    p.add_argument("--timeout", type=float, default=180.0, help="seconds before a case is killed")
    p.add_argument("--markdown", type=Path, help="also write the table here")
    p.add_argument("--json", type=Path, help="also write the rows here")
    p.add_argument("--src", type=Path, help="run the twinbench of this src folder (another checkout's, to compare)")
    args = p.parse_args()
    if args.src:
        hostile_inputs.SRC = args.src.resolve()
    sys.path.insert(0, str(ROOT / "src"))
    only = {x for x in args.only.split(",") if x}
    rows = []
    with tempfile.TemporaryDirectory(prefix="hostile-folder-") as tmp:
        t = Path(tmp)
        extra, imported = more_cases(t)
        groups = set(args.groups.split(","))
        cases = [c for group, made in (("folder", folder_cases), ("more", lambda t: extra), ("bounds", bound_cases),
                                       ("lesser", lesser_cases)) if group in groups for c in made(t)
                 if not only or c.command in only]
        for i, c in enumerate(cases, 1):
            for group in ("more", "bounds", "lesser"):  # the --out of the case before
                shutil.rmtree(t / group / "o", ignore_errors=True)
            before = _snapshot(t)
            r = run_case(c, args.timeout, t)
            wrong = "; ".join(x for x in (_written(before, _snapshot(t), _allowed(c)), imported()) if x)
            if wrong:
                r = {**r, "ok": False, "problem": "; ".join(x for x in (r["problem"], wrong) if x)}
            rows.append(r)
            print(f"[{i}/{len(cases)}] {r['command']} {r['what']}: {r['code']} in {r['seconds']} s, "
                  f"{r['max_rss_mb']} MB {'ok' if r['ok'] else 'NOT OK: ' + r['problem']}: {r['first_line'][:150]}",
                  file=sys.stderr, flush=True)
    hostile_inputs.write(rows, args.markdown, args.json)
    sys.exit(0 if all(r["ok"] for r in rows) else 1)


if __name__ == "__main__":
    main()
