"""Hostile input against every command: what twinbench does with each, recorded (docs/bad-input.md).

Builds the inputs in a temporary directory (files that are folders, folders that are files, read-only places,
binary and truncated files, corrupt and bombing gzips, records with NaN, 300-digit numbers and paths that would
steer a re-run, absurd sizes), runs ``twinbench`` on each as a user would (a fresh process, a time limit), and
records the exit code, the first line of its error, the seconds it took, whether a traceback was printed and
whether anything was written where the command was not told to write. Nothing here asserts: a case's verdict
is ``ok`` when it ended as the docs promise (exit 2 and one ``error:`` line for bad input; otherwise its own
expected code) with no traceback. The table is printed as Markdown.

    PYTHONPATH=src python benchmarks/hostile_inputs.py [--only explain,predict] [--timeout 120] [--markdown FILE]

A few cases run real (tiny) training runs (the steering record of ``explain``), so the whole takes minutes.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from dataclasses import replace as dataclass_replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"  # the twinbench the cases run (another checkout's src to compare)
FIX = ROOT / "tests" / "explain" / "fixtures"
#: a place no one may write, root included (sysfs), and a folder there that exists
RO = "/sys/twinbench-hostile"
RO_DIR = "/sys/kernel"


@dataclass
class Case:
    command: str  # explain, predict, claims, diff, compare, sweep, export, score, report
    what: str  # the hostile input, in words
    args: list[str]
    expect: int = 2  # the exit code the docs promise
    env: dict[str, str] = field(default_factory=dict)
    check: Callable[[], str] | None = None  # '' when fine, else what went wrong (written outside --out...)
    tag: str = ""  # "folder": the cases of a results folder read as data (folder_io.py), run with --tag folder
    max_mb: int = 0  # the most peak resident memory (MB) the case may take (0: no bound)
    max_output: int = 0  # the most characters of output the case may print (0: no bound): a long name cut
    stdout: str = ""  # where its stdout goes instead of a file (/dev/full)
    sigterm_after: float = 0.0  # seconds after its start a SIGTERM is sent to the command (0: none)
    max_s: float = 0.0  # the most wall seconds the case may take (0: no bound beyond the run's limit)
    forbid: str = ""  # no line of its output may start with this (a record's text spoofing an ``error:`` line)
    want: str = ""  # its output must say this (a note the docs promise)


def record(framework: str, strategy: str, **extra: object) -> dict:
    """A minimal ok record of the tiny preset in the flat layout (``compare --json``'s; the loader reads it as it
    reads a line of before the sections), with ``extra`` fields on top, by their flat names."""
    from twinbench.record import for_spec
    from twinbench.spec import from_preset

    spec = from_preset("tiny", {}, framework=framework, strategy=strategy)
    r = for_spec(spec, "ok", n_params=100_000, device="cpu", platform="cpu", compile_s=0.5,
                 first_step_s=0.6, step_ms=10.0, step_ms_p10=9.0, step_ms_p90=11.0, tokens_per_s=1e4,
                 peak_mem_bytes=2**20, compiles_during_steps=0, loss_first=5.0, loss_last=4.0,
                 losses=[5.0, 4.0], step_times_ms=[10.0, 10.0]).flat()
    r.update(extra)
    return r


def results(d: Path, recs: list[dict], extra_lines: tuple[str, ...] = ()) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs)
                                     + "".join(x + "\n" for x in extra_lines))
    return d


def torch_trace(events: list[dict]) -> bytes:
    return json.dumps({"schemaVersion": 1, "traceEvents": events}).encode()


def steps(ts: object = None, dur: object = 100.0, n: int = 4) -> list[dict]:
    ev = [{"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "ts": 1000.0 * i, "dur": 900.0,
           "tid": 1} for i in range(n)]
    ev += [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1000.0 * i + 10, "dur": 100.0, "tid": 1}
           for i in range(n)]
    k = min(n + 1, len(ev) - 1)  # the second op (the only one of a one-step trace)
    if ts is not None:
        ev[k]["ts"] = ts
    ev[k]["dur"] = dur
    return ev


def build(t: Path) -> list[Case]:
    """Every input, made under ``t``, and the cases that use them."""
    a_file = t / "a_file.txt"
    a_file.write_text("not a folder\n")
    empty = t / "empty.txt"
    empty.write_text("")
    binary = t / "binary.bin"
    binary.write_bytes(bytes(range(256)) * 64)
    a_dir = t / "a_dir"
    a_dir.mkdir()
    fifo = t / "fifo"
    os.mkfifo(fifo)
    text = t / "text.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 400)

    # results folders
    good = results(t / "good", [record("torch", "eager"), record("jax", "jit")])
    garbage = results(t / "garbage", [], ("\x00\x01 not json", "{torn"))
    nan = results(t / "nan", [record("torch", "eager", step_ms=float("nan"))])
    huge_num = results(t / "huge", [record("torch", "eager", tokens_per_s=10**300, n_params=10**310),
                                    record("jax", "jit", step_ms=1e300)])
    nested_nan = results(t / "nested", [record("torch", "eager", explain_timing={"forward": float("nan")})])
    list_lines = results(t / "lists", [], ("[1, 2]", '"a string"', "42"))
    binary_res = t / "binres"
    binary_res.mkdir()
    (binary_res / "results.jsonl").write_bytes(bytes(range(256)) * 8)
    dir_res = t / "dirres"
    (dir_res / "results.jsonl").mkdir(parents=True)
    elsewhere = t / "elsewhere"
    steer = []
    for fw, st in (("torch", "eager"), ("jax", "jit")):
        r = record(fw, st)
        r["spec"].update(save_weights=str(elsewhere / "w"), cache_dir=str(elsewhere / "cache"),
                         trace_dir=str(elsewhere / "traces"), num_processes=2, process_id=0,
                         coordinator="127.0.0.1:45679")
        r["spec"]["train"].update(steps=4, warmup=1)
        steer.append(r)
    steering = results(t / "steer", steer)
    user_code = t / "payload.py"
    user_code.write_text("from pathlib import Path\nPath(__file__).with_name('PWNED').write_text('ran')\n"
                         "def build(cfg):\n    raise SystemExit('payload')\n")
    named = [record("torch", "eager"), record("jax", "jit")]
    for r in named:
        r["spec"].update(user_model=f"{user_code}:build")
        r["spec"]["model"]["family"] = "user"
    payload = results(t / "payload", named)
    huge_rec = [record("torch", "eager"), record("jax", "jit")]
    for r in huge_rec:
        r["spec"]["model"]["layers"] = 100000
    huge_spec = results(t / "hugespec", huge_rec)

    # traces
    tr = t / "traces"
    tr.mkdir()
    good_trace = tr / "torch_run.json.gz"
    shutil.copy(FIX / "hta_triton_example.json.gz", good_trace)
    beside = tr / "beside"
    beside.mkdir()
    shutil.copy(FIX / "hta_triton_example.json.gz", beside / "torch.json.gz")
    (beside / "other_job.xplane.pb").write_bytes(b"\x0a\x03abc")
    raw = gzip.compress(torch_trace(steps()) * 20)
    (tr / "corrupt.json.gz").write_bytes(bytes(b ^ (0xFF if 12 < i < 60 else 0) for i, b in enumerate(raw)))
    (tr / "truncated.json.gz").write_bytes(raw[: len(raw) // 2])
    (tr / "crc.json.gz").write_bytes(raw[:-8] + b"\0\0\0\0" + raw[-4:])
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    with (tr / "bomb.json.gz").open("wb") as f:
        f.write(c.compress(b'{"traceEvents": ['))
        for _ in range(256):
            f.write(c.compress(b" " * 2**20))
        f.write(c.flush())
    for name, content in {
        "text_ts.json": torch_trace(steps(ts="soon")),
        "null_ts.json": torch_trace([{**e, "ts": None} for e in steps()]),
        "null_dur.json": torch_trace(steps(dur=None)),
        "bool_ts.json": torch_trace(steps(ts=True)),
        "list_ts.json": torch_trace(steps(ts=[1, 2])),
        "huge_dur.json": torch_trace(steps(dur=1e308)),
        "neg_dur.json": torch_trace(steps(dur=-5.0)),
        "inf_dur.json": torch_trace(steps(dur="Infinity")),
        "huge_ts.json": torch_trace(steps(ts=1e308)),
        "int300_ts.json": torch_trace(steps(ts=10**300)),
        "no_events.json": b'{"traceEvents": []}',
        "events_dict.json": b'{"traceEvents": {"a": 1}}',
        "empty_obj.json": b"{}",
        "bare_list.json": b"[1, 2, 3]",
        "deep.json": b"[" * 100000 + b"]" * 100000,
        "bom.json": b"\xef\xbb\xbf" + torch_trace(steps()),
        "binary.json": bytes(range(256)),
        "empty.json": b"",
        "names.json": torch_trace([{**e, "name": 12345} for e in steps()]),
        "args_list.json": torch_trace([{**e, "args": [1, 2]} for e in steps()]),
        "one_step.json": torch_trace(steps(n=1)),
    }.items():
        (tr / name).write_bytes(content)
    (tr / "binary.xplane.pb").write_bytes(bytes(range(256)) * 4)
    (tr / "gzbad.xplane.pb.gz").write_bytes(b"\x1f\x8b" + b"\x00" * 30)
    hlo_bin = tr / "bin.hlo.txt"
    hlo_bin.write_bytes(b"\xff\xfe\x00\x01" * 100)
    xla_dir = tr / "xla_dump"
    xla_dir.mkdir()
    jax_rec_dir = t / "binhlo"
    jax_rec_dir.mkdir()
    (jax_rec_dir / "host.xplane.pb").write_bytes(b"\x0a\x03abc")
    binhlo = results(t / "binhlo_res", [record("torch", "eager", trace_path=str(good_trace),
                                               explain_timing={"forward": 1.0}),
                                        record("jax", "jit", trace_path=str(jax_rec_dir / "host.xplane.pb"),
                                               explain_hlo_path=str(hlo_bin), explain_timing={"forward": 1.0})])

    # checkpoints
    ck = t / "ck"
    _export(ck)
    truncated_ck = t / "ck_trunc"
    shutil.copytree(ck, truncated_ck)
    st = truncated_ck / "model.safetensors"
    st.write_bytes(st.read_bytes()[: st.stat().st_size // 2])
    garbage_ck = t / "ck_garbage"
    shutil.copytree(ck, garbage_ck)
    (garbage_ck / "model.safetensors").write_bytes(b"garbage!" * 4)
    bad_cfg = t / "ck_badcfg"
    shutil.copytree(ck, bad_cfg)
    (bad_cfg / "config.json").write_text("{not json")
    neg_cfg = t / "ck_negcfg"
    shutil.copytree(ck, neg_cfg)
    cfg = json.loads((ck / "config.json").read_text())
    (neg_cfg / "config.json").write_text(json.dumps({**cfg, "n_layer": -3}))
    no_weights = t / "ck_noweights"
    no_weights.mkdir()
    (no_weights / "config.json").write_text((ck / "config.json").read_text())
    saved = t / "saved"  # a results folder whose record names weights that are garbage
    (saved / "w").mkdir(parents=True)
    (saved / "w" / "bad.safetensors").write_bytes(b"garbage")
    results(saved, [record("torch", "eager", weights_path=str(saved / "w" / "bad.safetensors"))])

    # calibration files
    cal = {}
    for name, change in {"failed": {"status": "failed"}, "preset": {"preset": "no-such"},
                         "batch1e9": {"batch": 10**9}, "batchstr": {"batch": "eight"}, "nodevice": {"device": "Abacus"},
                         "stepnan": {"step_ms": float("nan")}, "seq0": {"seq": 0}}.items():
        r = record("jax", "jit", device="TPU v5 lite", platform="tpu", preset="tiny", batch=8, seq=32)
        r.update(change)
        cal[name] = results(t / f"cal_{name}", [r]) / "results.jsonl"
    hang = t / "hangs.py"
    hang.write_text("import time\ntime.sleep(3600)\n")
    not_py = t / "model.txt"
    not_py.write_text("this is not python(\n")
    syntax = t / "syntax.py"
    syntax.write_text("def build(cfg:\n")

    out = str(t / "out")
    tiny = ["--preset", "tiny"]
    cmp_ = ["compare", *tiny, "--strategies", "torch:eager", "--out", out]
    cases = [
        # ---------------------------------------------------------------------------------------------- explain
        Case("explain", "a torch .json.gz beside an unrelated *.xplane.pb", ["explain", str(beside / "torch.json.gz")], 0),
        Case("explain", "a good torch trace", ["explain", str(good_trace)], 0),
        Case("explain", "a missing file", ["explain", str(t / "nope.json")]),
        Case("explain", "an empty folder", ["explain", str(a_dir)]),
        Case("explain", "a FIFO", ["explain", str(fifo)]),
        Case("explain", "/dev/zero", ["explain", "/dev/zero"]),
        Case("explain", "a text file", ["explain", str(a_file)]),
        Case("explain", "a binary file", ["explain", str(binary)]),
        Case("explain", "corrupt gzip bytes", ["explain", str(tr / "corrupt.json.gz")]),
        Case("explain", "a truncated gzip", ["explain", str(tr / "truncated.json.gz")]),
        Case("explain", "a gzip with a wrong CRC", ["explain", str(tr / "crc.json.gz")]),
        Case("explain", "a 256 MiB gzip bomb (cap 64 MiB)", ["explain", str(tr / "bomb.json.gz")],
             env={"TWINBENCH_MAX_TRACE_MB": "64"}),
        *[Case("explain", f"trace: {name}", ["explain", str(tr / name)]) for name in (
            "text_ts.json", "null_ts.json", "bool_ts.json", "list_ts.json", "huge_dur.json", "neg_dur.json",
            "inf_dur.json", "huge_ts.json", "int300_ts.json", "no_events.json", "events_dict.json", "empty_obj.json",
            "bare_list.json", "deep.json", "binary.json", "empty.json")],
        Case("explain", "trace: a null dur (read as 0)", ["explain", str(tr / "null_dur.json")], 0),
        Case("explain", "trace: one step only", ["explain", str(tr / "one_step.json")], 0),
        Case("explain", "trace: a UTF-8 BOM before the JSON", ["explain", str(tr / "bom.json")], 0),
        Case("explain", "trace: event names that are numbers", ["explain", str(tr / "names.json")], 0),
        Case("explain", "trace: args that are a list", ["explain", str(tr / "args_list.json")], 0),
        Case("explain", "runs with --out a file", ["explain", "torch:eager", "jax:jit", *tiny, "--out", str(a_file)]),
        Case("explain", "a binary *.xplane.pb", ["explain", str(tr / "binary.xplane.pb")]),
        Case("explain", "a *.xplane.pb.gz of zeros", ["explain", str(tr / "gzbad.xplane.pb.gz")]),
        Case("explain", "--hlo a binary file", ["explain", str(tr / "binary.xplane.pb"), "--hlo", str(hlo_bin)]),
        Case("explain", "--hlo a folder with no dumps", ["explain", str(tr / "binary.xplane.pb"), "--hlo", str(xla_dir)]),
        Case("explain", "--rank 99 of one file (a note: one file is one rank)", ["explain", str(good_trace), "--rank",
                                                                                "99"], 0),
        Case("explain", "--rank 99 of a folder", ["explain", str(beside), "--rank", "99"]),
        Case("explain", "--device 99", ["explain", str(good_trace), "--device", "99"]),
        Case("explain", "--step-marker that is not there", ["explain", str(tr / "bom.json"), "--step-marker", "nope"]),
        Case("explain", "--json into a folder", ["explain", str(good_trace), "--json", str(a_dir)]),
        Case("explain", "--json read-only", ["explain", str(good_trace), "--json", f"{RO_DIR}/e.json"]),
        Case("explain", "--timeout nan", ["explain", str(good_trace), "--timeout", "nan"]),
        Case("explain", "a record whose HLO file is binary", ["explain", f"{binhlo}:torch/eager", f"{binhlo}:jax/jit"]),
        Case("explain", "a results folder with no such run", ["explain", f"{good}:torch/nope", f"{good}:jax/jit"]),
        Case("explain", "a results folder of garbage", ["explain", f"{garbage}:torch/eager", f"{garbage}:jax/jit"]),
        Case("explain", "a results.jsonl that is a folder", ["explain", f"{dir_res}:torch/eager", f"{dir_res}:jax/jit"]),
        Case("explain", "a record naming its own model (payload)", ["explain", f"{payload}:torch/eager",
                                                                    f"{payload}:jax/jit", "--out", out],
             check=lambda: "payload ran" if (t / "PWNED").exists() else ""),
        Case("explain", "a record with layers 100000", ["explain", f"{huge_spec}:torch/eager", f"{huge_spec}:jax/jit",
                                                        "--out", out]),
        Case("explain", "--try with no side", ["explain", "torch:eager", "jax:jit", *tiny, "--try", "threads=1"]),
        Case("explain", "--try C:threads=1", ["explain", "torch:eager", "jax:jit", *tiny, "--try", "C:threads=1"]),
        Case("explain", "--try B:threads=many", ["explain", "torch:eager", "jax:jit", *tiny, "--try", "B:threads=x"]),
        Case("explain", "--try B:nope=1", ["explain", "torch:eager", "jax:jit", *tiny, "--try", "B:nope=1"]),
        Case("explain", "--try on traces", ["explain", str(good_trace), str(good_trace), "--try", "B:threads=1"]),
        Case("explain", "--depths 2,x", ["explain", "torch:eager", "jax:jit", *tiny, "--depths", "2,x"]),
        Case("explain", "--depths 4", ["explain", "torch:eager", "jax:jit", *tiny, "--depths", "4"]),
        Case("explain", "--depths 0,2", ["explain", "torch:eager", "jax:jit", *tiny, "--depths", "0,2"]),
        Case("explain", "--depths without a JAX side", ["explain", "torch:eager", "torch:compile", *tiny, "--depths",
                                                        "2,4"]),
        Case("explain", "an unknown run", ["explain", "torch:nope", "jax:jit", *tiny]),
        Case("explain", "a record steering paths, ports, processes (runs 2 tiny steps)",
             ["explain", f"{steering}:torch/eager", f"{steering}:jax/jit", "--out", out], 0,
             check=lambda: f"wrote {sorted(p.name for p in elsewhere.rglob('*'))}" if elsewhere.exists() else ""),
        # ---------------------------------------------------------------------------------------------- predict
        Case("predict", "--layers 100000 on a v5e", ["predict", *tiny, "--strategies", "jax:jit", "--device",
                                                     "tpu-v5e", "--layers", "100000"]),
        Case("predict", "--batch 1000000000", ["predict", *tiny, "--strategies", "jax:jit", "--device", "tpu-v5e",
                                               "--batch", "1000000000"]),
        Case("predict", "--vocab of 300 digits", ["predict", *tiny, "--strategies", "jax:jit", "--device", "h100",
                                                  "--vocab", "9" * 300]),
        Case("predict", "--device abacus", ["predict", *tiny, "--device", "abacus"]),
        Case("predict", "--devices 0", ["predict", *tiny, "--device", "tpu-v5e", "--devices", "0"]),
        Case("predict", "--lr nan", ["predict", *tiny, "--device", "tpu-v5e", "--lr", "nan"]),
        Case("predict", "--precision fp8", ["predict", *tiny, "--device", "tpu-v5e", "--precision", "fp8"]),
        Case("predict", "--strategies jax:nope", ["predict", *tiny, "--device", "tpu-v5e", "--strategies", "jax:nope"]),
        Case("predict", "--seq 0", ["predict", *tiny, "--device", "tpu-v5e", "--seq", "0"]),
        Case("predict", "--timeout 0", ["predict", *tiny, "--device", "tpu-v5e", "--timeout", "0"]),
        Case("predict", "--json into a folder", ["predict", *tiny, "--device", "tpu-v5e", "--json", str(a_dir)]),
        Case("predict", "--json read-only", ["predict", *tiny, "--device", "tpu-v5e", "--json", f"{RO_DIR}/p.json"]),
        Case("predict", "--calibrate a folder", ["predict", *tiny, "--device", "tpu-v5e", "--calibrate", str(a_dir)]),
        Case("predict", "--calibrate /dev/zero", ["predict", *tiny, "--device", "tpu-v5e", "--calibrate", "/dev/zero"]),
        Case("predict", "--calibrate an empty file", ["predict", *tiny, "--device", "tpu-v5e", "--calibrate", str(empty)]),
        Case("predict", "--calibrate a binary file", ["predict", *tiny, "--device", "tpu-v5e", "--calibrate",
                                                      str(binary)]),
        *[Case("predict", f"--calibrate: a record with {k}", ["predict", *tiny, "--strategies", "jax:jit", "--device",
                                                              "tpu-v5e", "--calibrate", str(p)]) for k, p in cal.items()],
        Case("predict", "--model a missing file", ["predict", "--model", f"{t}/nope.py:build", "--device", "tpu-v5e",
                                                   "--strategies", "torch:eager"]),
        Case("predict", "--model not Python", ["predict", "--model", f"{not_py}:build", "--device", "tpu-v5e",
                                               "--strategies", "torch:eager"]),
        Case("predict", "--model with a syntax error", ["predict", "--model", f"{syntax}:build", "--device", "tpu-v5e",
                                                        "--strategies", "torch:eager"]),
        Case("predict", "--model hanging at import, --timeout 5", ["predict", "--model", f"{hang}:build", "--device",
                                                                   "tpu-v5e", "--strategies", "torch:eager",
                                                                   "--timeout", "5"],
             check=lambda: _leftover_tmp("twinbench-predict-")),
        # ----------------------------------------------------------------------------------------------- claims
        Case("claims", "--only C99", ["claims", "--only", "C99", "--out", out]),
        Case("claims", "--preset nope", ["claims", "--preset", "nope", "--only", "C1", "--out", out]),
        Case("claims", "--out a file", ["claims", "--only", "C1", "--out", str(a_file)]),
        Case("claims", "--out read-only", ["claims", "--only", "C1", "--out", RO]),
        Case("claims", "--timeout 0", ["claims", "--only", "C1", "--timeout", "0", "--out", out]),
        Case("claims", "--repeats 0", ["claims", "--only", "C1", "--repeats", "0", "--out", out]),
        Case("claims", "--json into a folder", ["claims", "--only", "C1", "--json", str(a_dir), "--out", out]),
        # ------------------------------------------------------------------------------------------------- diff
        Case("diff", "a missing folder", ["diff", str(t / "nope"), str(good)]),
        Case("diff", "a text file", ["diff", str(a_file), str(good)]),
        Case("diff", "garbage records", ["diff", str(garbage), str(good)]),
        Case("diff", "NaN step times", ["diff", str(nan), str(good)]),
        Case("diff", "JSON lists, strings and numbers as lines", ["diff", str(list_lines), str(good)]),
        Case("diff", "a binary results.jsonl", ["diff", str(binary_res), str(good)]),
        Case("diff", "results.jsonl a folder", ["diff", str(dir_res), str(good)]),
        Case("diff", "300-digit numbers and a 1e300 step time", ["diff", str(huge_num), str(good)], 0),
        Case("diff", "NaN in a nested field", ["diff", str(nested_nan), str(good)], 0),
        Case("diff", "the same folder twice", ["diff", str(good), str(good)], 0),
        Case("diff", "--json into a folder", ["diff", str(good), str(good), "--json", str(a_dir)]),
        Case("diff", "--json read-only", ["diff", str(good), str(good), "--json", f"{RO_DIR}/d.json"]),
        Case("diff", "--fail-above nan", ["diff", str(good), str(good), "--fail-above", "nan"]),
        Case("diff", "--fail-above -5", ["diff", str(good), str(good), "--fail-above", "-5"]),
        Case("report", "300-digit numbers", ["report", str(huge_num)], 0),
        # ---------------------------------------------------------------------------------------- compare, sweep
        Case("compare", "--layers 100000", ["compare", *tiny, "--strategies", "torch:eager,jax:jit", "--layers",
                                            "100000", "--out", out]),
        Case("compare", "--batch 1000000000", [*cmp_, "--batch", "1000000000"]),
        Case("compare", "--d-model of 300 digits", [*cmp_, "--d-model", "8" * 300]),
        Case("compare", "--threads 100000", [*cmp_, "--threads", "100000"]),
        Case("compare", "--threads -1", [*cmp_, "--threads", "-1"]),
        Case("compare", "--lr nan", [*cmp_, "--lr", "nan"]),
        Case("compare", "--lr -1", [*cmp_, "--lr", "-1"]),
        Case("compare", "--weight-decay inf", [*cmp_, "--weight-decay", "inf"]),
        Case("compare", "--slow-input nan", [*cmp_, "--slow-input", "nan"]),
        Case("compare", "--heads 3 (does not divide d_model)", [*cmp_, "--heads", "3"]),
        Case("compare", "--seq 100000", [*cmp_, "--seq", "100000"]),
        Case("compare", "--warmup 100", [*cmp_, "--warmup", "100"]),
        Case("compare", "--steps 0", [*cmp_, "--steps", "0"]),
        Case("compare", "--devices 0", [*cmp_, "--devices", "0"]),
        Case("compare", "--preset nope", ["compare", "--preset", "nope", "--out", out]),
        Case("compare", "--strategies nope", ["compare", *tiny, "--strategies", "nope", "--out", out]),
        Case("compare", "--framework cobol", ["compare", *tiny, "--framework", "cobol", "--out", out]),
        Case("compare", "--cache nope", [*cmp_, "--cache", "nope"]),
        Case("compare", "--cache-dir a file", [*cmp_, "--cache-dir", str(a_file)],
             check=lambda: _lock_only(Path(out))),
        Case("compare", "--cache-dir read-only", [*cmp_, "--cache-dir", RO], check=lambda: _lock_only(Path(out))),
        Case("compare", "--out a file", ["compare", *tiny, "--strategies", "torch:eager", "--out", str(a_file)]),
        Case("compare", "--out read-only", ["compare", *tiny, "--strategies", "torch:eager", "--out", RO]),
        Case("compare", "--out whose results.jsonl is a folder", ["compare", *tiny, "--strategies", "torch:eager",
                                                                  "--out", str(dir_res)]),
        Case("compare", "--json read-only", [*cmp_, "--json", f"{RO_DIR}/c.json"]),
        Case("compare", "--trace read-only", [*cmp_, "--trace", RO]),
        Case("compare", "--trace a file", [*cmp_, "--trace", str(a_file)]),
        Case("compare", "--save-weights read-only", [*cmp_, "--save-weights", RO]),
        Case("compare", "--save-weights under a file", [*cmp_, "--save-weights", f"{a_file}/w"]),
        Case("compare", "--init-from truncated weights", ["compare", "--init-from", str(truncated_ck), "--strategies",
                                                          "torch:eager,jax:jit", "--out", out]),
        Case("compare", "--init-from garbage weights", ["compare", "--init-from", str(garbage_ck), "--strategies",
                                                        "torch:eager", "--out", out]),
        Case("compare", "--init-from a config that is not JSON", ["compare", "--init-from", str(bad_cfg),
                                                                  "--strategies", "torch:eager", "--out", out]),
        Case("compare", "--init-from n_layer -3", ["compare", "--init-from", str(neg_cfg), "--strategies",
                                                   "torch:eager", "--out", out]),
        Case("compare", "--init-from with no weights", ["compare", "--init-from", str(no_weights), "--strategies",
                                                        "torch:eager", "--out", out]),
        Case("compare", "--init-from a file", ["compare", "--init-from", str(a_file), "--out", out]),
        Case("compare", "--data /dev/zero", [*cmp_, "--data", "/dev/zero"]),
        Case("compare", "--data a binary file", [*cmp_, "--data", str(binary)]),
        Case("compare", "--data an empty file", [*cmp_, "--data", str(empty)]),
        Case("compare", "--data a folder", [*cmp_, "--data", str(a_dir)]),
        Case("compare", "--timeout nan", [*cmp_, "--timeout", "nan"]),
        Case("compare", "--repeats 0", [*cmp_, "--repeats", "0"]),
        Case("compare", "--plan-steps 0", [*cmp_, "--plan-steps", "0"]),
        Case("compare", "--resume a folder without results", [*cmp_, "--resume", str(a_dir)]),
        Case("compare", "--launcher nope", [*cmp_, "--launcher", "nope"]),
        Case("compare", "--model a missing file", [*cmp_, "--model", f"{t}/nope.py:build"]),
        Case("compare", "--model not Python", [*cmp_, "--model", f"{not_py}:build"]),
        Case("compare", "--jax-model without --model", [*cmp_, "--jax-model", f"{syntax}:build_jax"]),
        Case("sweep", "--over layers=1,100000", ["sweep", *tiny, "--strategies", "torch:eager", "--over",
                                                 "layers=1,100000", "--out", out]),
        Case("sweep", "--over nope=1", ["sweep", *tiny, "--over", "nope=1", "--out", out]),
        Case("sweep", "--over layers=", ["sweep", *tiny, "--over", "layers=", "--out", out]),
        Case("sweep", "--over layers=a,b", ["sweep", *tiny, "--over", "layers=a,b", "--out", out]),
        Case("sweep", "--over without =", ["sweep", *tiny, "--over", "layers", "--out", out]),
        Case("sweep", "--cache-dir read-only", ["sweep", *tiny, "--strategies", "torch:eager", "--over", "batch=1,2",
                                                "--cache-dir", RO, "--out", out]),
        Case("sweep", "--threads 100000", ["sweep", *tiny, "--strategies", "torch:eager", "--over", "batch=1,2",
                                           "--threads", "100000", "--out", out]),
        # ------------------------------------------------------------------------------------------------ export
        Case("export", "--out a file", ["export", *tiny, "--out", str(a_file)]),
        Case("export", "--out read-only", ["export", *tiny, "--out", RO]),
        Case("export", "--layers 10000000", ["export", *tiny, "--layers", "10000000", "--out", out]),
        Case("export", "--from a missing folder", ["export", "--from", str(t / "nope"), "--out", out]),
        Case("export", "--from garbage records", ["export", "--from", str(garbage), "--out", out]),
        Case("export", "--from a record with garbage weights", ["export", "--from", str(saved), "--out", out]),
        Case("export", "--from with no saved weights", ["export", "--from", str(good), "--out", out]),
        Case("export", "--weights a binary file", ["export", *tiny, "--weights", str(binary), "--out", out]),
        Case("export", "--weights a truncated file", ["export", *tiny, "--weights",
                                                      str(truncated_ck / "model.safetensors"), "--out", out]),
        Case("export", "--weights and --from", ["export", "--from", str(good), "--weights", str(binary), "--out", out]),
        Case("export", "--run without --from", ["export", *tiny, "--run", "torch/eager", "--out", out]),
        Case("export", "--init-from truncated weights", ["export", "--init-from", str(truncated_ck), "--out", out]),
        # ------------------------------------------------------------------------------------------------- score
        Case("score", "--init-from a missing folder", ["score", "--init-from", str(t / "nope"), "--data", str(text)]),
        Case("score", "--init-from truncated weights", ["score", "--init-from", str(truncated_ck), "--data", str(text)]),
        Case("score", "--init-from garbage weights", ["score", "--init-from", str(garbage_ck), "--data", str(text)]),
        Case("score", "--init-from a config that is not JSON", ["score", "--init-from", str(bad_cfg), "--data",
                                                                str(text)]),
        Case("score", "--init-from with no weights", ["score", "--init-from", str(no_weights), "--data", str(text)]),
        Case("score", "--data missing", ["score", "--init-from", str(ck), "--data", str(t / "nope.txt")]),
        Case("score", "--data /dev/zero", ["score", "--init-from", str(ck), "--data", "/dev/zero"]),
        Case("score", "--data empty", ["score", "--init-from", str(ck), "--data", str(empty)]),
        Case("score", "--data binary", ["score", "--init-from", str(ck), "--data", str(binary)]),
        Case("score", "--data a folder", ["score", "--init-from", str(ck), "--data", str(a_dir)]),
        Case("score", "--batch 0", ["score", "--init-from", str(ck), "--data", str(text), "--batch", "0"]),
        Case("score", "--max-windows -1", ["score", "--init-from", str(ck), "--data", str(text), "--max-windows", "-1"]),
        Case("score", "--compare-windows 0", ["score", "--init-from", str(ck), "--data", str(text), "--compare-windows",
                                              "0"]),
        Case("score", "--tokenizer missing", ["score", "--init-from", str(ck), "--data", str(text), "--tokenizer",
                                              str(t / "nope.json")]),
        Case("score", "--tokenizer garbage", ["score", "--init-from", str(ck), "--data", str(text), "--tokenizer",
                                              str(binary)]),
        Case("score", "--framework cobol", ["score", "--init-from", str(ck), "--data", str(text), "--framework",
                                            "cobol"]),
        Case("score", "--timeout 0", ["score", "--init-from", str(ck), "--data", str(text), "--timeout", "0"]),
        Case("score", "--json into a folder", ["score", "--init-from", str(ck), "--data", str(text), "--json",
                                               str(a_dir)]),
    ]
    return cases + [dataclass_replace(c, tag="folder") for c in folder_cases(t)]


def folder_cases(t: Path) -> list[Case]:
    """A results folder is data: settings that name code and paths, links out of the folder, a 2 GB file,
    variants that must pass compare's checks, interrupts and endless timeouts (docs/bad-input.md 2-10)."""
    f = t / "folder"
    f.mkdir()
    marker = f / "IMPORTED"
    planted = f / "planted.py"
    planted.write_text(f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\ndef build(): ...\n")
    outside = f / "outside"
    outside.mkdir()
    (outside / "precious.txt").write_text("keep")

    def untouched() -> str:
        wrong = []
        if marker.exists():
            wrong.append("imported a file the folder names")
        if sorted(p.name for p in outside.iterdir()) != ["precious.txt"] or \
                (outside / "precious.txt").read_text() != "keep":
            wrong.append("wrote outside the folder")
        return "; ".join(wrong)

    def settings(name: str, value: object) -> Path:
        d = f / name
        d.mkdir()
        (d / "claims-settings.json").write_text(json.dumps(value))
        return d

    model_claims = settings("claims-model", {"quick": True, "only": "C6", "model": f"{planted}:build"})
    trace_claims = settings("claims-trace", {"quick": True, "only": "C1", "trace": str(outside / "traces")})
    typed_claims = settings("claims-typed", {"repeats": "3"})
    null_claims = settings("claims-null", {"plan_steps": None, "only": None})
    linked = {}
    for name in ("report.html", "plots", "results.jsonl", "summary.md"):
        d = results(f / f"link-{name}", [record("torch", "eager"), record("jax", "jit")])
        target = outside if name == "plots" else outside / "precious.txt"
        if name == "results.jsonl":  # a link to a results file outside: the resumed runs would append to it
            target = outside / "precious.txt"
            (d / name).unlink()
        (d / name).symlink_to(target)
        linked[name] = d

    big = f / "big"
    big.mkdir()
    with open(big / "results.jsonl", "wb") as fh:
        fh.truncate(2 * 2**30)  # sparse: a 2 GB file of NUL bytes that takes no disk
    pair = results(f / "pair", [record("torch", "eager"), record("jax", "jit")])
    rejected = results(f / "rejected", [record("torch", "eager", step_ms=1e300), record("jax", "jit")])
    trace_dir = f / "old-profile"
    (trace_dir / "plugins" / "profile").mkdir(parents=True)
    script = f / "train.py"
    script.write_text("print('a script')\n")
    silent = f / "never-answers"
    silent.write_text("#!/bin/sh\nsleep 600\n")
    silent.chmod(0o755)
    out = str(f / "o")
    ex = ["explain", f"{pair}:torch/eager", f"{pair}:jax/jit", "--out", out]
    cmp_ = ["compare", "--preset", "tiny", "--strategies", "torch:eager", "--out", out]
    return [
        Case("claims", "--resume: settings name a model", ["claims", "--resume", str(model_claims)], check=untouched),
        Case("claims", "--resume: settings name a trace folder (--plan)", ["claims", "--resume", str(trace_claims),
                                                                           "--plan"], 0, check=untouched),
        Case("claims", "--resume: repeats \"3\"", ["claims", "--resume", str(typed_claims)]),
        Case("claims", "--resume: plan_steps null (--plan)", ["claims", "--resume", str(null_claims), "--plan"], 0),
        Case("claims", "--timeout inf", ["claims", "--quick", "--only", "C1", "--timeout", "inf", "--out", out]),
        Case("report", "report.html a link out of the folder", ["report", str(linked["report.html"])],
             check=untouched),
        Case("report", "plots/ a link out of the folder", ["report", str(linked["plots"])], check=untouched),
        Case("compare", "--resume: results.jsonl a link out of the folder",
             [*cmp_[:-2], "--resume", str(linked["results.jsonl"])], check=untouched),
        Case("compare", "--resume: summary.md a link out of the folder",
             [*cmp_[:-2], "--resume", str(linked["summary.md"])], check=untouched),
        Case("compare", "--timeout 1e308", [*cmp_, "--timeout", "1e308"]),
        Case("report", "a 2 GB sparse results.jsonl", ["report", str(big)]),
        Case("diff", "a 2 GB sparse results.jsonl", ["diff", str(big), str(big)]),
        Case("explain", "a 2 GB sparse results.jsonl", ["explain", f"{big}:torch/eager", f"{big}:jax/jit"]),
        Case("predict", "--calibrate a 2 GB sparse results.jsonl",
             ["predict", "--preset", "tiny", "--device", "tpu-v5e", "--calibrate", str(big / "results.jsonl")]),
        Case("explain", "a record with step_ms 1e300", ["explain", f"{rejected}:torch/eager", f"{rejected}:jax/jit",
                                                        "--out", out]),
        Case("explain", "--try B:layers=100000", [*ex, "--try", "B:layers=100000"]),
        Case("explain", "--try B:lr=nan", [*ex, "--try", "B:lr=nan"]),
        Case("explain", "--try B:batch=1e23", [*ex, "--try", "B:batch=1e23"]),
        Case("explain", "--try B:init_from=DIR", [*ex, "--try", f"B:init_from={pair}"]),
        Case("explain", "--try B:data=/dev/zero", [*ex, "--try", "B:data=/dev/zero"]),
        Case("explain", "--try B:save_weights=DIR", [*ex, "--try", f"B:save_weights={outside}"], check=untouched),
        Case("explain", "--try A:--xla_... on the torch side", [*ex, "--try", "A:--xla_cpu_use_thunk_runtime=false"]),
        Case("explain", "--depths 2,100000", [*ex, "--depths", "2,100000"]),
        Case("predict", "--strategies jax:pmap", ["predict", "--preset", "tiny", "--strategies", "jax:pmap",
                                                  "--device", "tpu-v5e"]),
        Case("predict", "--strategies torch:fsdp", ["predict", "--preset", "tiny", "--strategies", "torch:fsdp",
                                                    "--device", "h200"]),
        Case("doctor", "--trace a folder holding an older profile", ["doctor", str(script),
                                                                     "--trace", str(trace_dir)]),
        Case("doctor", "--python that never answers, --timeout 3",
             ["doctor", str(script), "--python", str(silent), "--timeout", "3"]),
        Case("peak", "--threads 100000", ["peak", "--threads", "100000"]),
    ]


def _export(ck: Path) -> None:
    from twinbench.export import export_weights
    from twinbench.models.hf import save_hf
    from twinbench.plan import model_spec

    spec = model_spec("tiny", {})
    save_hf(spec.model, export_weights(spec)[0], ck)


def _lock_only(out: Path) -> str:
    if out.exists() and {p.name for p in out.iterdir()} <= {".twinbench.lock"}:
        return "--out left holding only its lock"
    return ""


def _leftover_tmp(prefix: str) -> str:
    left = list(Path(tempfile.gettempdir()).glob(prefix + "*"))
    return f"left {len(left)} temp folder(s) {prefix}*" if left else ""


def run_case(c: Case, timeout: float, t: Path) -> dict:
    """Run one case in a fresh process group; its outcome."""
    out = t / "out"
    if out.exists():
        shutil.rmtree(out)
    env = {**os.environ, "PYTHONPATH": str(SRC), "COLUMNS": "200", **c.env}
    started = time.perf_counter()
    with tempfile.TemporaryFile() as so, tempfile.TemporaryFile() as se, \
            open(c.stdout or os.devnull, "wb") as device:
        proc = subprocess.Popen([sys.executable, "-c", "from twinbench.cli import app; app()", *c.args], env=env,
                                stdout=device if c.stdout else so, stderr=se, cwd=t, start_new_session=True)
        code, rss_kib, cpu_s = _wait(proc, started + timeout, started + c.sigterm_after if c.sigterm_after else None)
        so.seek(0)
        se.seek(0)
        stdout, stderr = (x.read().decode(errors="replace") for x in (so, se))
    seconds = time.perf_counter() - started
    text = stderr + stdout
    errors = [ln for ln in text.splitlines() if ln.startswith("error:")]
    first = errors[0] if errors else next((ln for ln in stderr.splitlines() if ln.strip()), "")
    problem = c.check() if c.check else ""
    bounds = [f"{rss_kib // 1024} MB, over {c.max_mb}" if c.max_mb and rss_kib > c.max_mb * 1024 else "",
              # CPU seconds: what the command itself spent, whatever other processes take of a shared machine; and
              # a wall bound three times that, which a command waiting on anything (a FIFO, a lock) outruns
              f"{cpu_s:.1f} CPU s, over {c.max_s:g}" if c.max_s and cpu_s > c.max_s else "",
              f"{seconds:.1f} s wall, over {3 * c.max_s:g}" if c.max_s and seconds > 3 * c.max_s else "",
              f"printed a line starting {c.forbid!r}" if c.forbid and any(
                  ln.startswith(c.forbid) for ln in text.splitlines()) else "",
              f"did not say {c.want!r}" if c.want and c.want not in " ".join(text.split()) else "",
              f"printed {len(text)} characters" if c.max_output and len(text) > c.max_output else "",
              "printed an escape code" if "\x1b" in text else ""]
    problem = "; ".join(x for x in (problem, *bounds) if x)
    traceback = "Traceback" in text
    one_line = code != 2 or len(errors) == 1
    ok = code == c.expect and not traceback and one_line and not problem
    return {"command": c.command, "what": c.what, "expect": c.expect, "code": code, "seconds": round(seconds, 1),
            "cpu_s": round(cpu_s, 1),
            "max_rss_mb": round(rss_kib / 1024),
            "first_line": first[:240], "traceback": traceback, "problem": problem, "ok": ok}


def _wait(proc: subprocess.Popen, deadline: float, sigterm_at: float | None = None) -> tuple[int | str, int, float]:
    """(exit code or "timeout", the process's peak resident memory in KiB, its CPU seconds): os.wait4's own figures
    of that one process (its CPU time with its waited-for children's), the case's memory and work. ``sigterm_at``:
    when to send the command a SIGTERM (once)."""
    while True:
        if sigterm_at is not None and time.perf_counter() > sigterm_at:
            os.kill(proc.pid, signal.SIGTERM)
            sigterm_at = None
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            return proc.returncode, usage.ru_maxrss, usage.ru_utime + usage.ru_stime
        if time.perf_counter() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = -9
            return "timeout", usage.ru_maxrss, usage.ru_utime + usage.ru_stime
        time.sleep(0.05)


def markdown(rows: list[dict]) -> str:
    lines = ["| # | command | hostile input | exit (expected) | s | CPU s | MB | first line of the error / output | "
             "verdict |", "|---:|---|---|---|---:|---:|---:|---|---|"]
    for i, r in enumerate(rows, 1):
        first = r["first_line"].replace("|", "\\|").replace(str(Path(tempfile.gettempdir())), "TMP")
        verdict = "ok" if r["ok"] else "NOT OK" + (f": {r['problem']}" if r["problem"] else "") + \
            (": traceback" if r["traceback"] else "")
        lines.append(f"| {i} | {r['command']} | {r['what']} | {r['code']} ({r['expect']}) | {r['seconds']} | "
                     f"{r.get('cpu_s', '')} | {r.get('max_rss_mb', '')} | {first} | {verdict} |")
    n_ok = sum(r["ok"] for r in rows)
    lines.append("")
    lines.append(f"{n_ok} of {len(rows)} as promised.")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", default="", help="comma-separated commands (explain,predict,...); default: all")
    p.add_argument("--timeout", type=float, default=180.0, help="seconds before a case is killed")
    p.add_argument("--tag", default="", help="only the cases of this tag (folder: a results folder read as data)")
    p.add_argument("--markdown", type=Path, help="also write the table here")
    p.add_argument("--json", type=Path, help="also write the rows here")
    args = p.parse_args()
    sys.path.insert(0, str(ROOT / "src"))
    only = {x for x in args.only.split(",") if x}
    with tempfile.TemporaryDirectory(prefix="hostile-") as tmp:
        t = Path(tmp)
        cases = [c for c in build(t) if (not only or c.command in only) and (not args.tag or c.tag == args.tag)]
        rows = []
        for i, c in enumerate(cases, 1):
            r = run_case(c, args.timeout, t)
            rows.append(r)
            print(f"[{i}/{len(cases)}] {r['command']} {r['what']}: {r['code']} in {r['seconds']} s "
                  f"{'ok' if r['ok'] else 'NOT OK'}: {r['first_line'][:150]}", file=sys.stderr, flush=True)
    write(rows, args.markdown, args.json)


def write(rows: list[dict], markdown_path: Path | None, json_path: Path | None) -> None:
    """The rows' table on stdout, and into ``--markdown`` and (the rows) ``--json`` when given."""
    table = markdown(rows)
    print(table)
    if markdown_path:
        markdown_path.write_text(table + "\n")
    if json_path:
        json_path.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
