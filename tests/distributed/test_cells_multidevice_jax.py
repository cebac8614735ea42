"""Every JAX multi-device cell (2 simulated CPU devices, one process), GPT and BERT, against one device
(cells_check.py says the tolerances)."""

from __future__ import annotations

import pytest
from cells_check import check_cell, check_devices, run_cells
from parity_cells import FAMILIES, JAX_MULTI_BF16, JAX_MULTI_EQUAL

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    return run_cells("jax", tmp_path_factory)


@pytest.mark.parametrize("fam", FAMILIES)
@pytest.mark.parametrize("cell", JAX_MULTI_EQUAL + JAX_MULTI_BF16)
def test_multidevice_cell_matches_one_device(results, fam, cell):
    check_cell(results, fam, "jax", cell)


@pytest.mark.parametrize("fam", FAMILIES)
@pytest.mark.parametrize("cell", [c for c in JAX_MULTI_EQUAL + JAX_MULTI_BF16 if c != "mesh-dp+replicate-batch"])
def test_multidevice_cell_splits_the_batch_and_holds_what_it_says(results, fam, cell):
    check_devices(results, fam, cell, dp="mesh-dp+remat", fsdp="mesh-fsdp+remat")


@pytest.mark.parametrize("fam", FAMILIES)
def test_anti_patterns_are_flagged(results, fam):
    """Claims C10 and C13 as they happen: a replicated batch, and gradients never averaged across devices."""
    replicated, nosync = results[fam]["mesh-dp+replicate-batch:report"], results[fam]["pmap+nosync:report"]
    assert not replicated["sharding"]["batch"][0]["sharded"]
    assert any("is replicated on all 2 devices" in w for w in replicated["warnings"])
    assert nosync["sharding"]["replicas_max_abs_diff"] > 0
    assert any("not synchronised" in w for w in nosync["warnings"]), nosync["warnings"]


@pytest.mark.parametrize("fam", FAMILIES)
def test_every_cell_compiles_its_step_once(results, fam):
    """No program is compiled after a cell's first step: state placed with another sharding than the step
    returns it (pmap's optimizer state once came out of an unnamed pmap) would recompile on step two."""
    late = {k: v for k, v in results[fam].items() if k.endswith(":late_compiles")}
    assert len(late) == len(JAX_MULTI_EQUAL + JAX_MULTI_BF16) + 2  # the cells, the baseline and pmap+nosync
    assert {k: v for k, v in late.items() if v} == {}
