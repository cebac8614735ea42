"""FLOPs per token, achieved FLOP/s and MFU, computed in one place for every run.

Convention (Kaplan et al. 2020 / PaLM appendix B; what nanoGPT and torchtitan print): a training step
costs ``6 N + 12 L d T`` FLOPs per token, where ``N`` is the parameter count without position embeddings
(a tied LM head counted once), ``L`` layers, ``d`` the model width and ``T`` the sequence length (the
attention score and value products, forward and backward). Recomputation (remat) is not counted: MFU is
"model" FLOPs utilisation.
"""

from __future__ import annotations


def flops_per_token(n_params_no_pos: int, layers: int, d_model: int, seq: int) -> int:
    """The GPT formula from a parameter count (kept for callers that have no model family; the families own
    their FLOPs per token: ``models/family.py``)."""
    return 6 * n_params_no_pos + 12 * layers * d_model * seq


FLOP_CONVENTION = "FLOPs/token = 6N + 12*L*d*T (N without position embeddings; remat not counted)"

