"""Every single-device cell of the strategy matrix but the torch.compile ones against its framework's baseline,
for GPT, BERT and Llama (the compiled cells: ``test_cells_compiled.py``; the runs: ``cells_single.py``).

The runs come from ``tests/parity_cells.py`` (what the matrix test counts as covered). Tolerances: JAX fp32
cells equal ``jit`` within 2e-5 relative per step (scan-layers reorders the layer loop; scan-steps is the same
program); torch fp32 cells equal ``eager`` within 1e-6 (remat recomputes the same ops); bf16 cells within 2e-2
relative of fp32, yet different from it.
"""

from __future__ import annotations

import numpy as np
import pytest
from cells_single import baseline, cells, layers_of, over, run_cell
from parity_cells import JAX_BF16, JAX_EQUAL, TORCH_BF16, TORCH_EQUAL


@pytest.mark.parametrize(("fam", "strategy"), cells(JAX_EQUAL, compiled=False))
def test_jax_fp32_cells_equal_jit(fam, strategy):
    np.testing.assert_allclose(run_cell(fam, "jax", strategy, **over(strategy)), baseline(fam, "jax"), rtol=2e-5)


@pytest.mark.parametrize(("fam", "strategy"), cells(TORCH_EQUAL, compiled=False))
def test_torch_fp32_cells_equal_eager(fam, strategy):
    losses = run_cell(fam, "torch", strategy, **over(strategy))
    np.testing.assert_allclose(losses, baseline(fam, "torch", layers_of(strategy)), rtol=1e-6)


@pytest.mark.parametrize(("fam", "framework", "strategy"),
                         cells(JAX_BF16, "jax", compiled=False) + cells(TORCH_BF16, "torch", compiled=False))
def test_bf16_cells_close_to_fp32_but_not_equal(fam, framework, strategy):
    losses = run_cell(fam, framework, strategy, **over(strategy))
    ref = baseline(fam, framework, layers_of(strategy))
    np.testing.assert_allclose(losses, ref, rtol=2e-2)
    assert max(abs(a - b) for a, b in zip(losses, ref, strict=True)) > 1e-7, "bf16 compute had no effect"
