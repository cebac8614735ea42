"""Every PyTorch multi-device cell (one torchrun launch of 2 ranks), GPT and BERT, against one device
(cells_check.py says the tolerances)."""

from __future__ import annotations

import pytest
from cells_check import check_cell, check_devices, run_cells
from parity_cells import FAMILIES, TORCH_MULTI_BF16, TORCH_MULTI_EQUAL

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    return run_cells("torch", tmp_path_factory)


@pytest.mark.parametrize("fam", FAMILIES)
@pytest.mark.parametrize("cell", TORCH_MULTI_EQUAL + TORCH_MULTI_BF16)
def test_multidevice_cell_matches_one_device(results, fam, cell):
    check_cell(results, fam, "torch", cell)


@pytest.mark.parametrize("fam", FAMILIES)
@pytest.mark.parametrize("cell", TORCH_MULTI_EQUAL + TORCH_MULTI_BF16)
def test_multidevice_cell_splits_the_batch_and_holds_what_it_says(results, fam, cell):
    check_devices(results, fam, cell, dp="ddp+remat", fsdp="fsdp+remat")
