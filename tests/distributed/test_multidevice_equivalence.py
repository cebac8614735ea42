"""Every multi-device strategy computes what one device computes, and its arrays live where it says.

With a global batch of 8 split over 2 devices, the loss trajectory of mesh-dp, mesh-fsdp, pmap (JAX) and
DDP, FSDP2 (PyTorch) must match the same framework's one-device run on the whole batch. Tolerance:
relative 1e-5 per step (measured: ~1e-7; the difference is only the order of the gradient sums). DDP,
pmap and mesh-dp replicas must be bit-identical after the run; FSDP must hold about 1/2 of the
params+optimizer bytes per device that data parallelism holds; the batch must really be split.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from dist_helpers import run

from twinbench.record import CONDITION_WARNINGS

RTOL = 1e-5
pytestmark = pytest.mark.slow  # five multi-device runs, each in its own process(es)
MULTI = [("jax", "mesh-dp"), ("jax", "mesh-fsdp"), ("jax", "pmap"), ("torch", "ddp"), ("torch", "fsdp")]
REPLICATED = [("jax", "mesh-dp"), ("jax", "pmap"), ("torch", "ddp")]


@pytest.fixture(scope="module")
def two_devices() -> dict[tuple[str, str], dict[str, Any]]:
    return {(fw, s): run(fw, s, 2) for fw, s in MULTI}


@pytest.mark.parametrize(("framework", "strategy"), MULTI)
def test_loss_trajectory_matches_one_device(two_devices, one_device, framework, strategy):
    r = two_devices[(framework, strategy)]
    assert r["status"] == "ok", r["error"]
    assert r["device_count"] == 2
    ref = one_device[framework]["losses"]
    assert len(r["losses"]) == len(ref) == 5
    np.testing.assert_allclose(r["losses"], ref, rtol=RTOL, err_msg=f"{framework}/{strategy} vs 1 device")
    assert r["losses"][-1] < r["losses"][0]  # it trained


@pytest.mark.parametrize(("framework", "strategy"), REPLICATED)
def test_replicas_hold_identical_parameters(two_devices, framework, strategy):
    rep = two_devices[(framework, strategy)]["sharding"]
    assert rep["replicas_max_abs_diff"] == 0.0
    assert all(not e["sharded"] for e in rep["params"]["entries"])


@pytest.mark.parametrize(("framework", "strategy"), MULTI)
def test_batch_is_split_and_nothing_is_flagged(two_devices, framework, strategy):
    r = two_devices[(framework, strategy)]
    for b in r["sharding"]["batch"]:
        assert b["sharded"], b
        assert b["bytes_per_device"] * 2 == b["bytes"] == 8 * 32 * 4
    assert [w for w in r["warnings"] if not w.startswith(CONDITION_WARNINGS)] == []  # a busy machine may be said


@pytest.mark.parametrize(("framework", "dp", "fsdp"), [("jax", "mesh-dp", "mesh-fsdp"), ("torch", "ddp", "fsdp")])
def test_fsdp_holds_half_the_state_per_device(two_devices, framework, dp, fsdp):
    full, sharded = two_devices[(framework, dp)], two_devices[(framework, fsdp)]
    assert full["state_bytes_per_device"] == full["sharding"]["state_bytes_total"]
    ratio = sharded["state_bytes_per_device"] / full["state_bytes_per_device"]
    assert 0.49 < ratio < 0.51, ratio  # only the scalar step counters stay whole
    params = sharded["sharding"]["params"]
    assert params["bytes_per_device"] * 2 == params["bytes"]
    assert all(e["sharded"] for e in params["entries"])

