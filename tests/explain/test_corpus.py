"""explain on a corpus of public PyTorch/JAX training-script pairs (tests/explain/fixtures/README.md, "Public
training scripts"): a cause is named only on evidence. Before any gap row is named, both sides are
categorized (>= 90% of their op time), their phases are the program's (a step's backward matmul FLOPs about
twice its forward's, the forward found by data flow whether or not the step returns its loss), every rate
printed is possible on the device; where a check fails, no row is named and the summary says which check and
the fact that decides it (an eager JAX step: its dispatches a step). A busy machine is no check: each row is held
to its measured noise (tests/explain/test_noise.py).

The corpus differs on purpose: a Transformer (nanoGPT, the word-language-model / lm1b pair), a convnet (MNIST,
Flax NNX), a VAE (an MLP encoder/decoder: the Flax example's linen ``TrainState`` step that returns only the
new state, the same step returning its loss, and the same step not jitted), a recurrent pair (an LSTM
classifier: torch's ``nn.LSTM``, one fused oneDNN op a layer, against Flax's ``nn.scan`` of an LSTM cell), torch
loaders in the main process. The VAE and LSTM traces were recorded by ``twinbench doctor --trace`` and keep the
doctor's ``trace.json`` (``*.doctor.json``): its load, step kind and eager dispatches."""

from __future__ import annotations

import functools
import gzip
import json
import re
import tempfile
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.explain.typed import plain
from tests.explain.typed import side as typed_side
from twinbench.cli import app
from twinbench.explain import causes, command, gap
from twinbench.explain.side import Side

FIX = Path(__file__).parent / "fixtures"
#: pair -> (torch trace, JAX profile, the JAX step's compiled HLO)
CORPUS = {
    "nanogpt": ("pair_nanogpt_torch.json.gz", "pair_nanogpt_jax.xplane.pb.gz", "pair_nanogpt_jax.hlo.txt.gz"),
    "lm": ("pair_lm_torch.json.gz", "pair_lm_jax.xplane.pb.gz", "pair_lm_jax.hlo.txt.gz"),
    "mnist": ("pair_mnist_torch.json.gz", "pair_mnist_jax.xplane.pb.gz", "pair_mnist_jax.hlo.txt.gz"),
    "vae": ("pair_vae_torch.json.gz", "pair_vae_jax.xplane.pb.gz", "pair_vae_jax.hlo.txt.gz"),
    "vae_loss": ("pair_vae_torch.json.gz", "pair_vae_jax_loss.xplane.pb.gz", "pair_vae_jax_loss.hlo.txt.gz"),
    "vae_eager": ("pair_vae_torch.json.gz", "pair_vae_jax_eager.xplane.pb.gz", "pair_vae_jax_eager.hlo.txt.gz"),
    "rnn": ("pair_rnn_torch.json.gz", "pair_rnn_jax.xplane.pb.gz", "pair_rnn_jax.hlo.txt.gz"),
}
#: the pairs whose JAX step is jitted (the eager one's forward and backward are not told apart: no jit, no grad
#: transformation in one program)
JITTED = [p for p in CORPUS if p != "vae_eager"]
#: the cores of the machine every pair was recorded on (the README): the bound its rates are checked against
CORES = 2


@functools.cache
def explained(pair: str) -> dict[str, Any]:
    """The pair explained as its traces were left: a pair recorded by twinbench doctor in the folders it writes
    (its ``trace.json`` beside each trace: the load it saw), the others as the files the profilers wrote."""
    t, j, h = CORPUS[pair]
    records = [FIX / f.replace(".json.gz", ".doctor.json").replace(".xplane.pb.gz", ".doctor.json") for f in (t, j)]
    if not all(r.is_file() for r in records):
        return plain(command.explain_traces(str(FIX / t), str(FIX / j), hlo=str(FIX / h)))
    tmp = Path(tempfile.mkdtemp(prefix="twinbench-corpus-"))
    return plain(command.explain_traces(str(_doctor_dir(tmp, "torch", t, records[0].name)),
                                  str(_doctor_dir(tmp, "jax", j, records[1].name, h))))


def _mm_flops(e: dict[str, Any], phase: str) -> float:
    t = e.get("throughput") or {}
    return sum((t.get(phase, {}).get(c) or {}).get("flops", 0.0) for c in ("matmul", "attention"))


def _named(r: dict[str, Any]) -> list[str]:
    """The sentences that name a row as a cause: the summary's rows and the why lines that attribute one."""
    said = [w for w in r.get("why", []) if w.startswith(("implementation:", "framework:"))
            or re.match(r"^\w+ / [\w\- ]+ [+-]\d", w)]
    return said + ([] if _refused(r) else [r["summary"]])


def _refused(r: dict[str, Any]) -> bool:
    """Whether the summary names no row (after the clock's framing, where the doctor's clock is beside both)."""
    return "no row is named as a cause" in r["summary"].splitlines()[0].lower()


@pytest.mark.parametrize("pair", sorted(CORPUS))
def test_no_row_is_named_on_a_side_under_90_percent_categorized(pair: str) -> None:
    r = explained(pair)
    low = [s for s in ("a", "b") if r[s]["categorized_share"] < causes.CATEGORIZED_MIN]
    if low:
        assert _refused(r), r["summary"]
        assert not _named(r), _named(r)
        assert any(g["check"] == "categorized" for g in r["gates"])
    else:
        assert not any(g["check"] == "categorized" for g in r["gates"])


def test_a_pair_the_doctor_saw_on_a_busy_machine_names_rows_beyond_its_measured_noise() -> None:
    """Every VAE trace was recorded while other processes kept most of the 2 cores busy (the doctor's load): a
    busy machine refuses nothing by itself. Each row named is beyond its measured noise, its ± printed; the
    summary says the machine was busy; the LSTM pair, whose clock the profiler turned around, still names none."""
    for pair in ("vae", "vae_loss"):
        r = explained(pair)
        assert not r["gates"] and _named(r), (pair, r["gates"])
        named = [x for x in r["rows"] if x["level"] == 1 and x.get("named_ms")]
        assert named and all(abs(x["named_ms"]) > x["uncertainty_ms"] > 0 for x in named), named
        assert " ±" in r["summary"] and "measured on a busy machine" in r["summary"], r["summary"]
    r = explained("rnn")
    assert [g["check"] for g in r["gates"]] == ["clock"] and not _named(r), r["gates"]


def test_the_corpus_has_a_side_under_90_percent_categorized() -> None:
    """The eager Flax step: its ops run as programs of their own, which no category covers."""
    assert explained("vae_eager")["b"]["categorized_share"] < causes.CATEGORIZED_MIN


@pytest.mark.parametrize("pair", JITTED)
def test_backward_matmul_flops_are_about_twice_the_forwards(pair: str) -> None:
    """Each forward product has its weight gradient and (but the first layer's) its input gradient: the
    backward's matmul FLOPs are 1-2x the forward's on both sides, whatever the step returns."""
    r = explained(pair)
    for s in ("a", "b"):
        fw, bw = _mm_flops(r[s], "forward"), _mm_flops(r[s], "backward")
        assert fw > 0 and 0.9 <= bw / fw <= 3.2, (pair, s, fw, bw)
    assert not any(g["check"] == "phases" for g in r["gates"]), r["gates"]


def test_a_trainstate_step_that_returns_only_its_state_has_its_forward() -> None:
    """The Flax VAE's published step (``jax.grad``, ``return state.apply_gradients(grads=grads)``): XLA drops the
    unused loss and every forward result feeds only the backward. Its forward, found by data flow, is the same
    as the same step's that also returns the loss: the same matmuls, none of them filed as backward."""
    state_only, with_loss = explained("vae")["b"], explained("vae_loss")["b"]
    assert _mm_flops(state_only, "forward") > 0
    assert _mm_flops(state_only, "forward") == pytest.approx(_mm_flops(with_loss, "forward"))
    assert _mm_flops(state_only, "backward") == pytest.approx(_mm_flops(with_loss, "backward"))
    def where(phase: str) -> set[str]:
        return {o["where"] for o in state_only["ops"] if o["phase"] == phase and o["shape"]}

    layers = {f"{m}/{fc}/dot_general" for m, fc in (("encoder", "fc1"), ("encoder", "fc2_mean"), ("decoder", "fc1"),
                                                     ("decoder", "fc2"))}
    assert where("forward") >= layers, where("forward")  # every layer's product, none filed as backward
    assert state_only["trace"]["forward"] > 0.2 * state_only["trace"]["backward"], state_only["trace"]


@pytest.mark.parametrize("pair", sorted(CORPUS))
def test_every_printed_rate_is_physically_possible(pair: str) -> None:
    """No rate above what the recording machine's cores can reach (1 TFLOP/s and 1 TB/s a core, a bound
    no CPU core meets), in the tables or the output."""
    r = explained(pair)
    for s in ("a", "b"):
        for p, by_cat in r[s]["throughput"].items():
            for c, row in by_cat.items():
                assert (row.get("gbps") or 0) <= CORES * 1e3, (pair, s, p, c, row)
                assert (row.get("tflops") or 0) <= CORES * 1.0, (pair, s, p, c, row)
    rates = [float(x) for x in re.findall(r"([\d.]+) GB/s", json.dumps(r["rows"]) + " ".join(r["why"]))]
    assert all(x <= CORES * 1e3 for x in rates), rates


def test_the_eager_jax_side_is_named_as_op_by_op() -> None:
    r = explained("vae_eager")
    assert _refused(r), r["summary"]
    assert re.search(r"the JAX step runs op by op: \d+ dispatches a step .*jit it first", r["summary"]), r["summary"]
    assert not _named(r)


def test_a_fused_recurrent_layer_is_counted_as_its_gate_products() -> None:
    """torch's ``nn.LSTM`` on the CPU is one ``aten::mkldnn_rnn_layer`` op a layer (and one backward op): every
    step's gate products, ``2 T B 4H (I + H)`` FLOPs (the script's T 28, B 64, H 64, I 28). It is a matmul
    row with those FLOPs, its backward twice them, not element-wise work no FLOP is counted for."""
    a = explained("rnn")["a"]
    once = 2.0 * 28 * 64 * 4 * 64 * (28 + 64)
    assert _mm_flops(a, "forward") >= once and _mm_flops(a, "backward") >= 2 * once, a["throughput"]
    assert a["cells"]["forward"].get("matmul", 0) > a["cells"]["forward"].get("element-wise", 0), a["cells"]


def test_a_quiet_recording_of_the_lstm_pair_names_no_row_the_clock_contradicts(tmp_path: Path) -> None:
    """Recorded quiet, the LSTM pair's traces would split a gap with torch the slower side (its LSTM layers'
    matmuls, never element-wise work: the rows a fused recurrent op filed as element-wise once gave), but the
    doctor's own clock without the profiler, beside each trace, has the JAX script the slower one, as the
    scripts' A/B on a quiet machine has it (benchmarks/RESULTS.md): no row is named, and the summary says the
    profiler turned the gap around."""
    quiet = {"others_cores": 0.05, "cores": 2, "busy": False}
    t = _doctor_dir(tmp_path, "tr-torch", "pair_rnn_torch.json.gz", "pair_rnn_torch.doctor.json", load=quiet)
    j = _doctor_dir(tmp_path, "tr-jax", "pair_rnn_jax.xplane.pb.gz", "pair_rnn_jax.doctor.json",
                    "pair_rnn_jax.hlo.txt.gz", load=quiet)
    r = plain(command.explain_traces(str(t), str(j)))
    assert [g["check"] for g in r["gates"]] == ["clock"] and not _named(r), (r["summary"], r["gates"])
    assert "the profiler turned the gap around" in r["summary"], r["summary"]
    assert r["summary"].startswith("by the clock (twinbench doctor, without the profiler) jax:tr-jax is slower by "
                                   "27.5 ms a step"), r["summary"]  # framed on the clock's side
    assert r["gap_ms"] < 0 < r["b"]["measured"]["untraced_step_ms"] - r["a"]["measured"]["untraced_step_ms"]
    # the rows themselves still file the LSTM as matmul work
    torch_rows = {row["row"]: row for row in r["rows"]}
    assert not any("element-wise" in k and "rnn" in k for k in torch_rows), list(torch_rows)


def test_the_clock_check_fires_only_on_a_gap_turned_around_beyond_its_floor() -> None:
    def side(run: str, traced: float, untraced: float | None) -> Side:
        return typed_side({"run": run, "step_ms": traced,
                           **({"measured": {"untraced_step_ms": untraced}} if untraced else {})})

    turned = causes.clock_check(side("torch", 40.0, 43.0), side("jax", 30.0, 70.0))
    assert "turned the gap around" in turned and "torch is slower by 10.0" in turned and "jax is, by 27.0" in turned
    assert causes.clock_check(side("torch", 40.0, 43.0), side("jax", 90.0, 70.0)) == ""  # the same way
    assert causes.clock_check(side("torch", 40.0, 43.0), side("jax", 38.0, 46.0)) == ""  # both within the floor
    assert causes.clock_check(side("torch", 40.0, None), side("jax", 30.0, 70.0)) == ""  # no untraced step


# ------------------------------------------------------------------------ as twinbench doctor --trace lays out
def _doctor_dir(tmp: Path, name: str, trace: str, record: str, hlo: str | None = None,
                **changes: Any) -> Path:
    """A ``twinbench doctor --trace DIR`` folder from the fixtures: torch's ``DIR/doctor.pt.trace.json``, JAX's
    ``DIR/plugins/profile/RUN/vm.xplane.pb`` and ``DIR/step.hlo.txt``; the doctor's ``DIR/trace.json``."""
    d = tmp / name
    if trace.endswith(".json.gz"):
        d.mkdir(parents=True)
        (d / "doctor.pt.trace.json").write_bytes(gzip.decompress((FIX / trace).read_bytes()))
    else:
        run = d / "plugins" / "profile" / "2026_12_07_03_30_00"
        run.mkdir(parents=True)
        (run / "vm.xplane.pb").write_bytes(gzip.decompress((FIX / trace).read_bytes()))
    if hlo:
        (d / "step.hlo.txt").write_bytes(gzip.decompress((FIX / hlo).read_bytes()))
    info = {**json.loads((FIX / record).read_text()), **changes}
    (d / "trace.json").write_text(json.dumps(info))
    return d


def test_explain_finds_the_step_hlo_in_the_doctors_jax_folder(tmp_path: Path) -> None:
    """``twinbench explain DIR`` on the folder the doctor wrote: its ``step.hlo.txt`` is read, no ``--hlo``."""
    jdir = _doctor_dir(tmp_path, "tr-jax", "pair_vae_jax.xplane.pb.gz", "pair_vae_jax.doctor.json",
                       "pair_vae_jax.hlo.txt.gz")
    res = CliRunner().invoke(app, ["explain", str(jdir), "--json", str(tmp_path / "e.json")])
    assert res.exit_code == 0, res.output
    e = json.loads((tmp_path / "e.json").read_text())["a"]
    assert e["source"] == "jax.profiler + HLO" and e["categorized_share"] >= 0.9


def test_the_doctors_folder_carries_the_load_it_recorded(tmp_path: Path) -> None:
    """The doctor saw other processes keep most of the 2 cores busy: explain says so, and names the rows beyond
    the noise it measured, as the same traces recorded quiet do; quiet, it says nothing of a busy machine."""
    def pair(busy: bool) -> dict[str, Any]:
        load = {"others_cores": 1.75 if busy else 0.05, "cores": 2, "busy": busy}
        t = _doctor_dir(tmp_path / str(busy), "tr-torch", "pair_vae_torch.json.gz", "pair_vae_torch.doctor.json",
                        load=load)
        j = _doctor_dir(tmp_path / str(busy), "tr-jax", "pair_vae_jax_loss.xplane.pb.gz",
                        "pair_vae_jax_loss.doctor.json", "pair_vae_jax_loss.hlo.txt.gz", load=load)
        return plain(command.explain_traces(str(t), str(j)))

    busy = pair(True)
    assert busy["a"]["busy"] and busy["b"]["busy"] and not busy["gates"], busy["gates"]
    assert "measured on a busy machine: torch:tr-torch/doctor (its steps move" in busy["summary"], busy["summary"]
    calm = pair(False)
    assert not calm["a"]["busy"] and not calm["gates"] and "busy" not in calm["summary"], calm["summary"]
    assert busy["summary"].splitlines()[0] == calm["summary"].splitlines()[0]  # the same rows, the same noise


def test_the_doctors_dispatch_count_decides_the_eager_side(tmp_path: Path) -> None:
    t = _doctor_dir(tmp_path, "tr-torch", "pair_vae_torch.json.gz", "pair_vae_torch.doctor.json")
    j = _doctor_dir(tmp_path, "tr-jax", "pair_vae_jax_eager.xplane.pb.gz", "pair_vae_jax_eager.doctor.json",
                    "pair_vae_jax_eager.hlo.txt.gz")
    r = plain(command.explain_traces(str(t), str(j)))
    n = json.loads((FIX / "pair_vae_jax_eager.doctor.json").read_text())["eager_ops_per_step"]
    assert f"the JAX step runs op by op: {n:.0f} dispatches a step (counted by twinbench doctor)" in r["summary"]


def test_the_doctor_writes_what_decides_a_trace_beside_it(tmp_path: Path) -> None:
    from twinbench.doctor import trace

    (tmp_path / "trace.json").write_text(json.dumps({"framework": "jax", "steps": [4, 5], "files": [], "hlo": None}))
    obs = {"trace_timing": {"traced_step_ms": 30.0, "traced_steps": 4, "untraced_step_ms": 20.0, "untraced_steps": 9},
           "machine": {"others_cores": 1.6, "own_cores": 0.4, "cores": 2}, "step_kind": "jax-eager",
           "steady_steps": 10, "per_step": {"eager_ops": 245.0}}
    trace.write_timing(tmp_path, obs)
    info = json.loads((tmp_path / "trace.json").read_text())
    assert info["load"] == {"others_cores": 1.6, "cores": 2, "busy": True}
    assert info["eager_ops_per_step"] == 245.0 and info["untraced_step_ms"] == 20.0
    from twinbench.explain import doctor_timing

    got = doctor_timing.conditions(str(tmp_path), tmp_path / "x.xplane.pb")
    assert got.load is not None and got.load.busy
    assert got.eager_ops_per_step == 245.0 and got.step_kind == "jax-eager"


# ---------------------------------------------------------------------------------------------- unit checks
def _side(run: str, **kw: Any) -> dict[str, Any]:
    e = {"run": run, "step_ms": 40.0, "traced_step_ms": 40.0, "categorized_share": 1.0, "device": "CPU",
         "cores": 2, "trace": {"forward": 10.0, "backward": 20.0, "optimizer": 5.0, "input": 0.0, "rest": 5.0},
         "cells": {"forward": {"matmul": 10.0}, "backward": {"matmul": 20.0}, "optimizer": {"optimizer": 5.0},
                   "rest": {"idle": 5.0}},
         "scopes": {}, "timing": {}, "throughput": {"forward": {"matmul": {"flops": 1e9}},
                                                     "backward": {"matmul": {"flops": 2e9}}}, "notes": []}
    return {**e, **kw}


def test_a_rate_no_device_reaches_is_withheld_and_names_no_row() -> None:
    """A 2-core CPU cannot move 6582 GB/s: the rate is not shown, and no row is named."""
    a = _side("torch:x", throughput={"forward": {"matmul": {"flops": 1e9}}, "backward": {"matmul": {"flops": 2e9}},
                                      "optimizer": {"optimizer": {"bytes": 6.6e9, "gbps": 6582.0}}})
    a["ops"] = [{"phase": "forward", "category": "matmul", "name": "aten::mm", "shape": "[64,64]x[64,64]",
                 "flops": 5e11, "raw_ms": 0.1, "ms": 5.0},  # 5000 TFLOP/s: withheld from the shapes table, and said
                {"phase": "forward", "category": "matmul", "name": "aten::mm", "shape": "[8,8]x[8,8]", "flops": 5e9,
                 "raw_ms": 0.001, "ms": 0.001}]  # a tiny op's rate is the clock's grain: withheld, not said
    t = causes.physical(typed_side(a))
    assert t.throughput["optimizer"]["optimizer"].gbps is None and t.ops[0].flops == t.ops[1].flops == 0
    assert t.impossible == ["optimizer / optimizer counted at 6582 GB/s, over 2000 GB/s (a 2 cores CPU's bound)",
                               "forward [64,64]x[64,64] counted at 5000000 GFLOP/s, over 2000 GFLOP/s (a 2 cores CPU's "
                               "bound)"]
    r = plain(gap.pair(t, typed_side(_side("jax:y", step_ms=50.0))))
    assert {g["check"] for g in r["gates"]} == {"rates"} and _refused(r)
    assert "6582" not in json.dumps(r["rows"])


def test_a_forward_counted_as_backward_fails_the_phase_check() -> None:
    b = _side("jax:y", throughput={"backward": {"matmul": {"flops": 5e9}}})
    assert "the forward pass was not found" in causes.phase_check(typed_side(b))
    odd = _side("jax:y", throughput={"forward": {"matmul": {"flops": 1e8}}, "backward": {"matmul": {"flops": 5e9}}})
    assert "50.00x its forward's" in causes.phase_check(typed_side(odd))
    assert causes.phase_check(typed_side(_side("torch:x"))) == ""


def test_timing_two_methods_disagree_on_is_not_shown_as_a_measurement() -> None:
    """The JAX twin's optimizer: 58.8 ms by timing (a difference of two whole steps) against 4.6 ms by trace.
    The column says it is scaled, the cell says the two are apart, and the gap table takes no timing B-A
    from it."""
    from rich.console import Console

    from twinbench.explain.breakdown import Breakdown

    b = Breakdown(steps_traced=1)
    b.add("forward", "matmul", 30.0)
    b.add("backward", "matmul", 60.0)
    b.add("optimizer", "optimizer", 4.6)
    b.finish(1, 94.6)
    timing = {"input": 0.0, "forward": 40.0, "backward": 44.0, "optimizer": 58.8, "rest": 0.0}
    e = gap.explain_breakdown(b, "jax/jit", 94.6, timing, [], gap.trace_record("jax"))
    assert e.timing_scale == pytest.approx(94.6 / 142.8)
    assert "optimizer" in e.timing_apart and "forward" not in e.timing_apart
    assert any(f"timing's optimizer is {58.8 * 94.6 / 142.8:.1f} ms (58.8 ms timed, scaled to the step) against the "
               "trace's 4.6 ms" in n for n in e.notes), e.notes
    console = Console(width=200, record=True)
    console.print(command.run_table(e))
    out = console.export_text()
    assert "timing ms (scaled x0.66)" in out and "x apart)" in out and "142.8 -> 94.6" in out
    other = gap.explain_breakdown(b, "torch/eager", 94.6, dict(timing, optimizer=5.0, backward=49.6), [],
                                  gap.trace_record("torch"))
    r = plain(gap.pair(other, e))
    opt = next(row for row in r["rows"] if row["row"] == "optimizer")
    fwd = next(row for row in r["rows"] if row["row"] == "forward")
    assert "timing_diff_ms" not in opt and "timing_diff_ms" in fwd


def test_dropout_on_one_side_only_is_a_difference_of_the_programs() -> None:
    """The lm pair: torch's nn.Transformer keeps its own dropout 0.1 (8.4 MB of masks a step), the Flax lm1b step
    draws no random numbers: a difference of the scripts, said as one (its A/B, torch's dropout to 0, made the
    torch script faster: benchmarks/results). Pairs whose random-number work is alike, or small, say nothing."""
    said = [w for w in explained("lm")["why"] if w.startswith("programs:")]
    assert len(said) == 1 and said[0].startswith("programs: torch:fixtures/pair_lm_torch's ops drawing random "
                                                 "numbers (dropout masks, noise) move 8.39 MB a step, "
                                                 "jax:fixtures/pair_lm_jax none"), said
    for pair in ("nanogpt", "mnist", "vae", "rnn"):
        assert not [w for w in explained(pair)["why"] if w.startswith("programs:")], pair
