"""explain on code twinbench did not write: three pairs of public training scripts, each a PyTorch training and
a JAX/Flax training of the same model or task, traced as docs/explain.md tells a user to (torch.profiler with
ProfilerStep marks; jax.profiler with StepTraceAnnotation and the XLA_FLAGS=--xla_dump_to HLO dump). Neither
side carries any of twinbench's scopes: the categories, the optimizer update and attention must come from
what the ops are. Fixtures and their sources: tests/explain/fixtures/README.md ("Public training scripts")."""

from __future__ import annotations

import functools
import gzip
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.explain.typed import plain
from twinbench.cli import app
from twinbench.explain import command

FIX = Path(__file__).parent / "fixtures"
#: pair -> whether its model has attention
PAIRS = {"nanogpt": True, "lm": True, "mnist": False}


def _files(pair: str) -> tuple[str, str, str]:
    return (str(FIX / f"pair_{pair}_torch.json.gz"), str(FIX / f"pair_{pair}_jax.xplane.pb.gz"),
            str(FIX / f"pair_{pair}_jax.hlo.txt.gz"))


@functools.cache
def explained(pair: str, expand: str = "categories") -> dict:
    torch_trace, jax_trace, hlo = _files(pair)
    return plain(command.explain_traces(torch_trace, jax_trace, expand, hlo=hlo))


def _cat(side: dict, category: str) -> float:
    return sum(row.get(category, 0.0) for row in side["cells"].values())


@pytest.mark.parametrize("pair", sorted(PAIRS))
def test_both_sides_are_categorized_by_what_their_ops_are(pair: str) -> None:
    r = explained(pair)
    for side in ("a", "b"):
        e = r[side]
        assert e["categorized_share"] >= 0.95, (side, e["other"])
        work = sum(v for p, row in e["cells"].items() for c, v in row.items() if c != "idle")
        assert e["trace"]["forward"] > 0.1 * work and e["trace"]["backward"] > 0.1 * work, (side, e["trace"])


@pytest.mark.parametrize("pair", sorted(PAIRS))
def test_the_optimizer_update_is_found_on_both_sides(pair: str) -> None:
    r = explained(pair)
    for side in ("a", "b"):
        assert r[side]["trace"]["optimizer"] > 0, (side, r[side]["trace"])
        assert _cat(r[side], "optimizer") > 0
    jax_side = r["b"]  # the port's optax update is no longer filed under rest / element-wise
    assert jax_side["trace"]["optimizer"] > jax_side["cells"]["rest"].get("element-wise", 0.0)


@pytest.mark.parametrize("pair", [p for p, attn in PAIRS.items() if attn])
def test_attention_is_found_on_both_sides_by_its_structure(pair: str) -> None:
    r = explained(pair)
    for side in ("a", "b"):
        for phase in ("forward", "backward"):
            assert r[side]["cells"].get(phase, {}).get("attention", 0.0) > 0, (side, phase, r[side]["cells"])


def test_no_attention_where_the_model_has_none() -> None:
    r = explained("mnist")  # convolutions on [B, C, 28, 28] images: square, but no product makes scores
    assert _cat(r["a"], "attention") == 0 and _cat(r["b"], "attention") == 0


def test_torch_written_out_attention_is_attention_too() -> None:
    e = plain(command.explain_traces(str(FIX / "pair_nanogpt_torch_manual.json.gz"), None))["a"]
    for phase in ("forward", "backward"):
        assert e["cells"][phase].get("attention", 0.0) > 0.02 * e["step_ms"], e["cells"][phase]


@pytest.mark.parametrize("pair", ["nanogpt", "lm"])
def test_jax_ops_carry_flops_from_the_hlo(pair: str, tmp_path: Path) -> None:
    """``--hlo DIR``, the ``--xla_dump_to`` directory as the user has it, not only a file."""
    torch_trace, jax_trace, hlo = _files(pair)
    dump = tmp_path / "dump"
    dump.mkdir()
    (dump / "module_0177.jit_train_step.cpu_after_optimizations.txt").write_bytes(gzip.decompress(Path(hlo).read_bytes()))
    r = plain(command.explain_traces(torch_trace, jax_trace, hlo=str(dump)))
    jax_rows = r["b"]["throughput"]
    assert jax_rows["forward"]["matmul"]["flops"] > 0 and jax_rows["backward"]["matmul"]["flops"] > 0
    assert jax_rows["forward"]["attention"]["flops"] > 0
    assert any(row["matched"] and row["b"]["tflops"] for row in r["shapes"]), "no JAX matmul matched by shape"


def test_jax_kernels_are_named_by_their_op_name() -> None:
    kernels = explained("nanogpt")["b"]["kernels"]
    assert any("mlp/c_fc/dot_general" in k["op"] for k in kernels), [k["op"] for k in kernels[:10]]


def test_runs_are_named_by_where_they_came_from(tmp_path: Path) -> None:
    """As the profilers lay them out: jax.profiler names its file after the host (``vm.xplane.pb``) under
    ``DIR/plugins/profile/DATE/``; a torch script exports ``trace.json`` into its own folder."""
    torch_trace, jax_trace, hlo = _files("nanogpt")
    jdir = tmp_path / "nanogpt_port" / "plugins" / "profile" / "2026_12_06_13_09_03"
    tdir = tmp_path / "nanogpt_torch"
    jdir.mkdir(parents=True)
    tdir.mkdir()
    (jdir / "vm.xplane.pb").write_bytes(gzip.decompress(Path(jax_trace).read_bytes()))
    (tdir / "trace.json").write_bytes(gzip.decompress(Path(torch_trace).read_bytes()))
    res = CliRunner().invoke(app, ["explain", str(tdir / "trace.json"), str(tmp_path / "nanogpt_port"),
                                   "--hlo", hlo, "--json", str(tmp_path / "e.json")])
    assert res.exit_code == 0, res.output
    out = json.loads((tmp_path / "e.json").read_text())
    assert out["a"]["run"] == "torch:nanogpt_torch/trace" and out["b"]["run"] == "jax:nanogpt_port"
    assert "A ms" in res.output and "B ms" in res.output  # columns never cut the names to a common prefix
    assert "measured without the profiler" not in res.output  # a Chrome trace named trace.json is not the doctor's file


def test_a_cpu_profile_without_its_hlo_asks_for_it_by_name() -> None:
    torch_trace, jax_trace, _ = _files("nanogpt")
    res = CliRunner().invoke(app, ["explain", torch_trace, jax_trace])
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and "--hlo" in lines[0] and "xla_dump_to" in " ".join(res.output.split()), res.output


def test_scopes_on_user_traces_say_there_are_none(tmp_path: Path) -> None:
    torch_trace, jax_trace, hlo = _files("nanogpt")
    res = CliRunner().invoke(app, ["explain", torch_trace, jax_trace, "--hlo", hlo, "--scopes",
                                   "--json", str(tmp_path / "e.json")])
    assert res.exit_code == 0, res.output
    out = json.loads((tmp_path / "e.json").read_text())
    assert "--scopes" in out["summary"] and out["largest"]["level"] == 0


@pytest.mark.parametrize("flag", [["--try", "B:--xla_cpu_use_thunk_runtime=true"], ["--depths", "2,4"],
                                  ["--step-marker", "nothere"], ["--rank", "3"], ["--device", "1"]])
def test_every_flag_on_user_traces_is_a_result_or_one_line(flag: list[str]) -> None:
    torch_trace, jax_trace, hlo = _files("nanogpt")
    res = CliRunner().invoke(app, ["explain", torch_trace, jax_trace, "--hlo", hlo, *flag])
    assert res.exit_code in (0, 2), res.output
    if res.exit_code == 2:
        assert len([ln for ln in res.output.splitlines() if ln.strip()]) == 1, res.output


def test_steps_cut_differently_are_said_with_their_figures() -> None:
    torch_trace, _, hlo = _files("nanogpt")
    r = plain(command.explain_traces(torch_trace, str(FIX / "pair_nanogpt_jax_noblock.xplane.pb.gz"), hlo=hlo))
    assert r["b"]["cut"]["coverage"] < 0.95 <= r["a"]["cut"]["coverage"]  # the port's annotation: dispatch only
    line = next(ln for ln in r["summary"].splitlines() if "steps cut differently" in ln)
    assert "whole loop iteration" in line and "start to start" in line
    assert r["b"]["categorized_share"] >= 0.95 and r["b"]["trace"]["backward"] > 0  # its ops, attributed
    same = explained("nanogpt")  # both annotations span the loop iteration: nothing to say
    assert "steps cut differently" not in same["summary"]


def test_an_interaction_layer_is_not_attention() -> None:
    """A recommender's feature interactions (``[B, F, D] @ [B, D, F]`` into square ``[B, F, F]``) make square
    products no softmax reads: not attention (an A100 DLRM-style job, public trace)."""
    e = plain(command.explain_traces(str(FIX / "hta_trace_diff_control.json.gz"), None))["a"]
    assert _cat(e, "attention") == 0


def test_torch_convolutions_carry_their_flops() -> None:
    """The PyTorch MNIST CNN's forward per step of 64 images: conv1 1->32 and conv2 32->64 (3x3, no padding,
    28 -> 26 -> 24), fc1 9216->128, fc2 128->10; its backward computes the weights' gradients of all four and
    the inputs' of all but conv1."""
    t = explained("mnist")["a"]["throughput"]
    conv1, conv2 = 2 * 64 * 26 * 26 * 32 * 1 * 9, 2 * 64 * 24 * 24 * 64 * 32 * 9
    fc1, fc2 = 2 * 64 * 9216 * 128, 2 * 64 * 128 * 10
    assert t["forward"]["matmul"]["flops"] == pytest.approx(conv1 + conv2 + fc1 + fc2, rel=1e-6)
    assert t["backward"]["matmul"]["flops"] == pytest.approx(conv1 + 2 * conv2 + 2 * fc1 + 2 * fc2, rel=1e-6)


@pytest.mark.parametrize("layers", ["transposed-2d", "transposed-1d", "transposed-3d", "strided-2d", "dilated-2d",
                                    "conv-1d", "conv-3d"])
def test_torch_convolution_flops_agree_with_torchs_own_counter(tmp_path: Path, layers: str) -> None:
    """A generator's transposed convolutions (a DCGAN's) and a strided one, forward and backward, profiled as
    the doctor profiles them: explain's FLOPs from each op's shapes sum to what ``FlopCounterMode`` counts for
    the same calls. On a CPU a transposed convolution computes inside ``aten::_convolution`` (no kernel op below
    it), and its backward's products run over its input, not its larger output."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from twinbench.explain import flops

    torch.manual_seed(0)
    nets = {"transposed-2d": (torch.nn.Sequential(torch.nn.ConvTranspose2d(8, 4, 4, 2, 1),
                                                  torch.nn.ConvTranspose2d(4, 3, 3, 1, 0)), (3, 8, 5, 7)),
            "transposed-1d": (torch.nn.ConvTranspose1d(6, 5, 4, 2, 1), (2, 6, 9)),
            "transposed-3d": (torch.nn.ConvTranspose3d(2, 3, 3, 2, 1), (2, 2, 4, 4, 4)),
            "strided-2d": (torch.nn.Conv2d(3, 8, 4, 2, 1), (3, 3, 12, 10)),
            "dilated-2d": (torch.nn.Conv2d(4, 6, 3, 1, 2, dilation=2), (2, 4, 9, 9)),
            "conv-1d": (torch.nn.Conv1d(4, 6, 5, 1, 2), (2, 4, 11)),
            "conv-3d": (torch.nn.Conv3d(2, 3, 3, 1, 1), (2, 2, 5, 5, 5))}
    net, shape = nets[layers]
    x = torch.randn(*shape, requires_grad=layers != "strided-2d")  # an input's gradient too, or the weights' only
    with FlopCounterMode(display=False) as counter:
        net(x).sum().backward()
    with torch.profiler.profile(record_shapes=True) as prof:
        net(x).sum().backward()
    prof.export_chrome_trace(str(tmp_path / "t.json"))
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    counted = sum(flops.torch_op(e["name"], e.get("args")).flops for e in events if e.get("cat") == "cpu_op")
    assert counter.get_total_flops() > 0 and counted == pytest.approx(counter.get_total_flops(), rel=1e-9)


def test_the_convolutions_argument_positions_are_torchs() -> None:
    """Where each convolution kernel op keeps its stride, padding and dilation among its inputs (the profiler's
    ``Concrete Inputs``, in schema order): as torch's own schemas name them, for every op explain costs."""
    import torch

    from twinbench.explain.flops import _TORCH_CONV

    for name, places in _TORCH_CONV.items():
        schema = getattr(torch.ops.aten, name.split("::")[1]).default._schema
        args = [a.name for a in schema.arguments]
        for at, what in zip(places, ("stride", "padding", "dilation"), strict=True):
            assert (at is None and what not in args) or (at is not None and args[at] == what), (name, what, args)


def _doctor_dirs(tmp_path: Path, torch_timing: dict, jax_timing: dict) -> tuple[Path, Path, str]:
    """The nanogpt pair laid out as ``twinbench doctor --trace DIR`` writes it (torch: ``DIR/doctor.pt.trace.json``;
    JAX: an xplane under ``DIR/plugins/profile/RUN/``), each with the doctor's ``DIR/trace.json``."""
    torch_trace, jax_trace, hlo = _files("nanogpt")
    tdir, jdir = tmp_path / "tr-torch", tmp_path / "tr-jax"
    run = jdir / "plugins" / "profile" / "2026_12_06_15_28_49"
    run.mkdir(parents=True)
    tdir.mkdir()
    (tdir / "doctor.pt.trace.json").write_bytes(gzip.decompress(Path(torch_trace).read_bytes()))
    (run / "vm.xplane.pb").write_bytes(gzip.decompress(Path(jax_trace).read_bytes()))
    for d, fw, timing in ((tdir, "torch", torch_timing), (jdir, "jax", jax_timing)):
        (d / "trace.json").write_text(json.dumps({"framework": fw, "steps": [4, 5, 6, 7, 8], "files": [],
                                                  "hlo": None, **timing}))
    return tdir, run / "vm.xplane.pb", hlo


def test_the_doctors_step_without_the_profiler_is_the_measured_step(tmp_path: Path) -> None:
    """twinbench doctor timed each script's step without the profiler and wrote it beside the trace: explain
    shows it as the run's measured step, says how much the profiler added, and the gap without it."""
    tdir, xplane, hlo = _doctor_dirs(
        tmp_path, {"traced_step_ms": 60.0, "traced_steps": 4, "untraced_step_ms": 30.0, "untraced_steps": 11},
        {"traced_step_ms": 27.0, "traced_steps": 4, "untraced_step_ms": 25.5, "untraced_steps": 11})
    res = CliRunner().invoke(app, ["explain", str(tdir), str(xplane), "--hlo", hlo, "--json", str(tmp_path / "e.json")],
                             terminal_width=200)
    assert res.exit_code == 0, res.output
    out = json.loads((tmp_path / "e.json").read_text())
    assert out["a"]["measured"]["untraced_step_ms"] == 30.0 and out["b"]["measured"]["untraced_step_ms"] == 25.5
    assert "2 trace files" not in res.output  # the doctor's trace.json is no trace of the folder
    sums = [ln for ln in res.output.splitlines() if ln.startswith("│ sum")]
    assert len(sums) == 2 and "30.0" in sums[0] and "25.5" in sums[1], sums  # the timing column's sum
    added = [ln for ln in res.output.splitlines() if "the profiler added" in ln]
    assert len(added) == 1 and "added 100% to this run's step (traced 60.0 ms, untraced 30.0 ms" in added[0], added
    gap = out["gap_ms"]
    line = next(ln for ln in out["summary"].splitlines() if "measured without the profiler" in ln)
    assert line.strip() == f"measured without the profiler the gap is -4.5 ms (traced: {gap:+.1f} ms)"
    assert line.strip() in res.output


@pytest.mark.parametrize("content", ["{not json", '{"framework": "torch", "untraced_step_ms": "fast"}',
                                     '{"framework": "torch", "untraced_step_ms": true}',
                                     '{"framework": "torch", "untraced_step_ms": NaN}'])
def test_a_malformed_doctor_trace_json_is_a_note(tmp_path: Path, content: str) -> None:
    tdir, _, _ = _doctor_dirs(tmp_path, {}, {})
    (tdir / "trace.json").write_text(content)
    e = plain(command.explain_traces(str(tdir / "doctor.pt.trace.json"), None))["a"]
    notes = [n for n in e["notes"] if "trace.json" in n]
    assert e["measured"] is None and len(notes) == 1 and "\n" not in notes[0], e["notes"]
    assert e["trace"]["forward"] > 0  # the trace itself is read all the same


def test_a_doctor_run_too_short_to_time_without_the_profiler_says_so(tmp_path: Path) -> None:
    tdir, _, _ = _doctor_dirs(tmp_path, {"traced_step_ms": 60.0, "traced_steps": 4}, {})
    e = plain(command.explain_traces(str(tdir), None))["a"]
    assert e["measured"] is None and any("could not time the step without the profiler" in n for n in e["notes"])
