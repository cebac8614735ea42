"""Where the claims suite measures, and at what sizes: one function from a platform to every claim group's sizes.

On a CPU the suite keeps its small presets (``tiny``, ``small``, ``bert-tiny``: minutes on two cores). On a GPU or
TPU it measures what the two threads of ``docs/claims.md`` talk about: BERT-base fine-tuning at batch 32 with real,
variable lengths (128 tokens; 512 in the full suite), GPT-2 124M and the ~300M Llama at 8 x 1024, in bf16 as
people train there, with the platform's fused attention on both sides (``splash`` on a TPU, cuDNN's on a GPU;
torchax lowers torch's SDPA to the same kernel). On a TPU every torch run is the torch twin through torchax on
the chip (``jax:torchax``): torch has no TPU runtime of its own here. ``--quick`` runs fewer and shorter runs
there, never smaller ones: on a chip a run's cost is its compile (about a minute at these sizes), so the quick
suite leaves out whole experiments (each says so in one line) rather than shrinking the model.

:func:`sizes_for` is the one place the choice is made (``core.setup_for`` builds the :class:`~twinbench.claims.core.Setup`
from it); the claim modules read it from the Setup. This module imports no other of the suite's.
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass

from twinbench.measure.platforms import DEVICE_NODES

PLATFORMS = ("cpu", "gpu", "tpu")
#: The JAX attention each platform fuses (``--attention-impl``): no seq x seq scores kept, both sides the same kernel.
ATTENTION = {"cpu": "default", "gpu": "cudnn", "tpu": "splash"}
#: Repeats of every timed run on a CPU (interleaved: A B C, A B C, A B C), the default of ``--repeats`` there.
REPEATS = 3
#: The ~300M model of the claims about size (C6-C8, C22) on an accelerator: the second thread's.
LARGE = "llama-300m"
#: Repeats of the timed runs on an accelerator (a CPU keeps ``REPEATS``): a step on a chip varies far less than
#: on a shared CPU (p10-p90 of every TPU sitting, benchmarks/RESULTS.md, "On a TPU") and each run costs a long
#: compile, so the quick suite runs each configuration once; the full suite twice.
ACCELERATOR_REPEATS = {True: 1, False: 2}
#: Claims the quick suite leaves out on a TPU, with why (the full suite runs them). Each would add compiles of
#: about a minute each at the seeds' sizes (docs/claims.md, "Budget on an accelerator").
QUICK_LEFT_OUT = {
    "C3": "its +dynamic run compiles once per new length (about 40 s each at bert-base on a TPU)",
    "C9": "it needs four more compiles (fp32 and bf16, both frameworks, with the same attention)",
    "C18": "its +dynamic and +bucket runs compile once per length or bucket (about 40 s each at bert-base)",
    "C17": "its three mask variants need the written-out attention, three more compiles of bert-base",
}
#: TPU VM accelerator types (the ``TPU_ACCELERATOR_TYPE`` a Cloud TPU VM sets) -> ``predict --device`` names.
TPU_TYPES = {"v4": "tpu-v4", "v5litepod": "tpu-v5e", "v5e": "tpu-v5e", "v5p": "tpu-v5p", "v6e": "tpu-v6e"}


def devices_here(platform: str) -> int:
    """How many accelerators of ``platform`` this machine has, 1 for a CPU: a Cloud TPU VM's chips from its
    ``TPU_ACCELERATOR_TYPE`` (``v5litepod-8``: 8 chips; ``v4-8``, ``v5p-8`` count TensorCores, two a chip), else the
    device nodes."""
    kind = (os.environ.get("TPU_ACCELERATOR_TYPE") or "").lower()
    name, _, count = kind.partition("-")
    if platform == "tpu" and count.isdigit() and name in TPU_TYPES:
        return max(int(count) // (2 if name in ("v4", "v5p") else 1), 1)
    pattern = {"tpu": DEVICE_NODES["tpu"], "gpu": ("/dev/nvidia[0-9]*",)}.get(platform, ())
    n = max((len(glob.glob(p)) for p in pattern), default=0)
    return max(n, 1)


def device_here(platform: str) -> str:
    """The ``predict --device`` name of this machine's accelerator when it can be told without a framework (a
    Cloud TPU VM's ``TPU_ACCELERATOR_TYPE``, e.g. ``v5litepod-1`` -> ``tpu-v5e``), else ``""``."""
    if platform != "tpu":
        return ""
    kind = (os.environ.get("TPU_ACCELERATOR_TYPE") or os.environ.get("ACCELERATOR_TYPE") or "").lower()
    return TPU_TYPES.get(kind.split("-")[0], "")


@dataclass(frozen=True)
class Sizes:
    """The Setup fields that carry a platform's sizes (core.Setup says what each is)."""

    gpt: str
    large: str
    bert: str
    bert_shape: dict[str, int]  # the BERT fine-tuning runs' overrides: batch (seq on an accelerator), steps, warmup
    repeats: int


def sizes_for(platform: str, quick: bool, preset: str | None = None) -> Sizes:
    """The sizes of ``platform``: the GPT preset of most runs, the larger model of the size claims, the BERT
    fine-tuning preset and its batch shape, and the repeats of timed runs."""
    if platform == "cpu":
        bert = {"batch": 4, "steps": 12, "warmup": 3} if quick else {"batch": 8, "steps": 40, "warmup": 5}
        return Sizes(gpt=preset or ("tiny" if quick else "small"), large="", bert="bert-tiny", bert_shape=bert,
                     repeats=REPEATS)
    bert = {"batch": 32, "seq": 128, "steps": 12, "warmup": 3} if quick else \
        {"batch": 32, "seq": 128, "steps": 20, "warmup": 5}
    return Sizes(gpt=preset or "gpt2-124m", large=LARGE, bert="bert-base", bert_shape=bert,
                 repeats=ACCELERATOR_REPEATS[quick])


def left_out(claim_id: str, quick: bool, platform: str) -> str:
    """Why the quick suite does not run ``claim_id`` on a TPU ("" when it does): what a short TPU session holds
    is the rest (``twinbench claims --quick --plan --device tpu-v5e``)."""
    why = QUICK_LEFT_OUT.get(claim_id) if quick and platform == "tpu" else None  # a GPU compiles the same steps faster
    if not why:
        return ""
    return (f"not run by --quick on a {platform.upper()} ({why}); `twinbench claims --only {claim_id}` "
            "measures it")
