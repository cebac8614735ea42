"""The input cost of a JAX loop on a CPU, where the input work and the step share the cores: found by the doctor's
own A/B (the step called back to back on a batch already built, between the loop's steps), not by idle time; and
every iteration's time in the split, on recorded calls and made-up A/B figures. The doctor's runs of a Flax NNX loop
whose batches come from a pure-Python tokenizer, as written and with its batches built before the loop, are in
test_doctor_fixes_run.py (the prebuilt run is also a donation fix's run there)."""

from __future__ import annotations

import pytest

from twinbench.doctor import findings as fd
from twinbench.doctor.recorder import Recorder


def _parts_ms(split: dict) -> float:
    return sum(split[k] for k in ("step_ms", "call_tail_ms", "host_ms", "descheduled_ms", "idle_ms"))


def test_the_split_adds_up_to_the_iteration() -> None:
    """An asynchronous step whose host work between calls overlaps it: the parts are cut from each iteration and
    averaged over the same iterations, so they sum to the iteration (medians of parts did not)."""
    rec = Recorder()
    key = "jit:step"
    rec.kinds[key] = "jit"
    t, cpu = 0.0, 0.0
    for i, (it, step) in enumerate([(10, 6), (15, 12), (11, 10), (30, 9), (12, 11), (13, 7), (14, 12)]):
        rec.calls[key].append((t, {"eager_s:s": 0.001 * i, "loop_cpu_s:s": cpu}))
        rec.ready[key][i] = t + 1e-3 * step
        rec.returned[key][i] = t + 1e-4
        rec.returned_cpu[key][i] = cpu
        t, cpu = t + 1e-3 * it, cpu + 1e-3 * (it - 1)
    rec.calls[key].append((t, {"eager_s:s": 0.007, "loop_cpu_s:s": cpu}))
    split = rec.split(key, set())
    assert split is not None
    assert _parts_ms(split) == pytest.approx(split["iter_ms"], rel=1e-9)
    assert split["between_cpu_ms"] > 0 and split["between_ms"] > split["between_cpu_ms"]


def test_the_verdict_needs_the_difference_beyond_the_noise() -> None:
    """A loop slower than the step on a pre-built batch by its median, but not by the test (a load that came and
    went), is not input-bound; the same difference beyond the noise is."""
    m = {"loop_ms": 10.0, "loop_less_known_ms": 10.0, "prebuilt_ms": 7.0, "gain": 0.3, "p": 0.2,
         "block_ms": [7.0] * 5}
    obs = {"steady_steps": 30, "input_check": {"blocks": 5, "replays": 20, "iterations": 20, "wall": m}}
    assert fd.input_bound(obs) is None
    m["p"] = 0.001
    found = fd.input_bound(obs)
    assert found is not None and "Mann-Whitney" in found.evidence
    m["prebuilt_ms"] = 8.5  # 15% of the iteration: under the threshold whatever the test says
    assert fd.input_bound(obs) is None
