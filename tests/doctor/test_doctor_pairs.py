"""The doctor on public training scripts it did not write: three pairs, each a PyTorch training and a JAX/Flax
training of the same model (nanoGPT and its Flax port, pytorch/examples MNIST and the Flax NNX MNIST example,
pytorch/examples word_language_model and Flax lm1b), and the Flax nanoGPT at d 256, where XLA:CPU's step buffers
are tens of MB, as published and with the page-faults fix. Their reports, as ``twinbench doctor --json`` wrote them
(``tests/doctor/fixtures/pair_reports.json.gz``; how they were made: its ``meta``), are read back here: the
findings must follow from the observations under today's thresholds, and each must agree with what an A/B of
the script itself established (``benchmarks/RESULTS.md``, "The doctor on public script pairs")."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from twinbench.doctor import findings as fd

FIXTURE = Path(__file__).parent / "fixtures" / "pair_reports.json.gz"
SCRIPTS = json.loads(gzip.decompress(FIXTURE.read_bytes()))["scripts"]

#: script -> findings that must never be warnings there, and why (the A/B that refuted them)
NOT_WARNINGS = {
    # loss.item() every iteration: the script reading once per 100,000 steps ran no faster (53.7 against
    # 63.6 ms, medians of 3); the doctor's own in-run A/B agrees (27.9 deferred against 28.0 ms as written)
    "nanogpt_jax": {"jax-host-sync", "jax-unrolled-loop"},  # 4 blocks under nn.scan: compiled no faster, ran 2-4x slower
    "lm_jax": {"jax-unrolled-loop"},  # the same 4-layer case
}
#: script -> warnings an A/B confirmed (the fix applied, the script measured again)
WARNINGS = {
    # (mnist_jax's jax-no-donation: its fix removed the finding, 5 of 5, and lowered the peak RSS, but memory was not
    # short there: it saves memory, not time, so it is info since issue 76; see CHANGED)
    # 36,000-36,800 faults a step, 26-28% in the kernel: started with GLIBC_TUNABLES=glibc.malloc.hugetlb=1 the port
    # stepped 16% faster (medians of 3) and the doctor on it no longer warned (3 of 3; the _host_malloc report)
    "nanogpt_jax_256": {"page-faults"},
}


#: script -> the severities today's thresholds give that differ from the report's, and why
CHANGED = {
    "mnist_jax": {"jax-no-donation": "info"},  # memory-only findings are info unless memory is short (issue 76)
}


def _got(obs: dict) -> dict[str, str]:
    """The findings today's thresholds give on these observations: id -> severity."""
    return {f.id: f.severity for f in fd.diagnose(obs)}


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_the_findings_follow_from_the_observations(name: str) -> None:
    report = SCRIPTS[name]["report"]
    assert _got(report["observations"]) == {f["id"]: f["severity"] for f in report["findings"]} | CHANGED.get(name, {})


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_every_warning_is_one_an_ab_confirmed(name: str) -> None:
    got = _got(SCRIPTS[name]["report"]["observations"])
    warnings = {i for i, s in got.items() if s == "warning"}
    assert warnings == WARNINGS.get(name, set()), got
    assert not warnings & NOT_WARNINGS.get(name, set())


def test_a_read_of_the_loss_is_not_called_costly_when_deferring_it_gains_nothing() -> None:
    """The port's read of the loss every iteration: the doctor's in-run A/B (reads answered one step late on
    alternate blocks) found no gain; the finding stays info and says the check was made."""
    obs = SCRIPTS["nanogpt_jax"]["report"]["observations"]
    check = obs["read_check"]
    assert check["waited_n"] >= 3 and check["deferred_n"] >= 3
    sync = next(f for f in fd.diagnose(obs) if f.id == "jax-host-sync")
    assert sync.severity == "info" and "checked by the doctor" in sync.evidence


def test_the_step_is_timed_by_completion_on_asynchronous_loops() -> None:
    """The JAX scripts dispatch ahead of the device: their step is the rate at which steps complete, not the
    dispatch rate (the Flax MNIST loop never reads the device: it dispatches in about 1.4 ms a step)."""
    for name in ("nanogpt_jax", "mnist_jax", "lm_jax"):
        obs = SCRIPTS[name]["report"]["observations"]
        assert obs["step_timing"] == "completion", name
    mnist = SCRIPTS["mnist_jax"]["report"]["observations"]
    assert mnist["step_ms"] > 5 * mnist["dispatch_ms"]
