"""The torch.compile cells of the strategy matrix against torch eager (the other single-device cells:
``test_cells.py``; the runs: ``cells_single.py``). A file of their own, so that a parallel test run can take
them and the other cells on different workers: they are the suite's largest cost for their number.

Cold torch.compile runs: four in all (the compiled cells of TORCH_EQUAL and TORCH_BF16, each on one family, the
families taking turns: parity_cells.COMPILED_ON), marked slow. fp32 cells equal ``eager`` within 1e-4 (Inductor
reorders float32 arithmetic); bf16 cells within 2e-2 relative of fp32, yet different from it. The whole-model
``compile`` cells and the ``+optc`` cells run one layer (against a one-layer baseline); the ``compile-regional``
cells keep two layers but ``+optc``'s, so in the bf16 one the second block really reuses the first block's
compiled code: it checks that dynamo holds one compiled entry for the block's code, not one per layer. The fp32
compiled cells compare the final weights with eager's too (the last step's update shows in no loss).
"""

from __future__ import annotations

import numpy as np
import pytest
from cells_single import baseline, baseline_run, block_compiled_once, cells, layers_of, over, train_cell
from parity_cells import TORCH_BF16, TORCH_EQUAL


@pytest.mark.parametrize(("fam", "strategy"), cells(TORCH_EQUAL, compiled=True))
def test_torch_fp32_compiled_cells_equal_eager(fam, strategy):
    ref, ref_weights = baseline_run(fam, "torch", layers_of(strategy))
    import torch._dynamo
    import torch._dynamo.utils as dynamo_utils

    torch._dynamo.reset()  # a graph another cell compiled is not reused here
    before = dynamo_utils.counters["stats"]["unique_graphs"]
    losses, trainer = train_cell(fam, "torch", strategy, **over(strategy))
    np.testing.assert_allclose(losses, ref, rtol=1e-4)
    graphs = dynamo_utils.counters["stats"]["unique_graphs"] - before
    if "+optc" in strategy:  # the optimizer step is compiled too: a graph of its own beside the model's
        assert graphs >= 2
    # within a few % of one AdamW step (Inductor reorders float32 arithmetic)
    weights = trainer.weights()
    worst = max(float(np.abs(weights[k] - ref_weights[k]).max()) for k in ref_weights)
    assert worst <= 1e-4, f"final weights differ from eager's by {worst}"
    if strategy.startswith("compile-regional"):
        block_compiled_once(trainer, layers_of(strategy))


@pytest.mark.parametrize(("fam", "strategy"), cells(TORCH_BF16, compiled=True))
def test_bf16_compiled_cells_close_to_fp32_but_not_equal(fam, strategy):
    import torch._dynamo

    torch._dynamo.reset()  # a graph another cell compiled is not reused here
    losses, trainer = train_cell(fam, "torch", strategy, **over(strategy))
    ref = baseline(fam, "torch", layers_of(strategy))
    np.testing.assert_allclose(losses, ref, rtol=2e-2)
    assert max(abs(a - b) for a, b in zip(losses, ref, strict=True)) > 1e-7, "bf16 compute had no effect"
    if strategy.startswith("compile-regional"):  # two layers here: the second block reuses the first's graph
        block_compiled_once(trainer, layers_of(strategy))
