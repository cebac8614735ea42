"""C22, the hardware: JAX wins unless you go to a TPU, where PyTorch runs through XLA too.

The experiment is the PyTorch path to the machine's accelerator against jax/jit, on the same GPT twin, the same
weights and batches: on a TPU the torch module under torchax (``jax:torchax``: PyTorch code compiled by XLA, as
torch has no TPU runtime of its own here), on a GPU CUDA eager and ``torch.compile`` (the best of the two), on a
CPU torchax as the fallback (the TPU path, run where no accelerator is). On an accelerator both run in bf16
(``+bf16``, how one trains there), on a CPU in fp32 (bf16 is emulated on a CPU).
"""

from __future__ import annotations

import glob

from twinbench.claims.core import (
    CONTRADICTED,
    DEPENDS,
    SUPPORTED,
    Claim,
    Evidence,
    Setup,
    Verdict,
    register,
    rnd,
)
from twinbench.spec import RunSpec

GROUP = "hardware"
#: |PyTorch path / jax:jit - 1| within this: the two meet (a TPU's answer); JAX ahead by at least this: it wins.
C22_TIE = 0.10
C22_RULE = (f"ratio = best PyTorch-path step / jax/jit step (TPU: jax/torchax; GPU: the best of torch/eager, "
            f"torch/compile; CPU: jax/torchax as the fallback). On a TPU: |ratio - 1| <= {C22_TIE:.0%} supported (the "
            f"paths meet), ratio > {1 + C22_TIE:.2f} contradicted (JAX still wins), ratio < {1 - C22_TIE:.2f} "
            f"contradicted (PyTorch wins). Elsewhere: ratio >= {1 + C22_TIE:.2f} supported (JAX wins), ratio <= 1 "
            "contradicted, in between depends.")


def accelerator_kind() -> str:
    """``tpu``, ``gpu`` or ``cpu`` from this machine's device nodes, without importing a framework."""
    if glob.glob("/dev/accel*") or glob.glob("/dev/vfio/[0-9]*"):
        return "tpu"
    if glob.glob("/dev/nvidia[0-9]*") or glob.glob("/dev/kfd"):
        return "gpu"
    return "cpu"


def c22_runs(s: Setup) -> dict[str, RunSpec]:
    kind = accelerator_kind() if s.accelerator else "cpu"
    bf16 = "+bf16" if kind != "cpu" else ""
    preset = s.big if kind != "cpu" else s.gpt  # a CPU keeps the suite's small preset (two short runs)
    runs = {"jit": s.spec("jax", f"jit{bf16}", preset)}
    if kind == "gpu":
        runs |= {"eager": s.spec("torch", f"eager{bf16}", preset), "compile": s.spec("torch", f"compile{bf16}", preset)}
    else:
        runs["torchax"] = s.spec("jax", f"torchax{bf16}", preset)
    return runs


def c22_judge(ev: Evidence) -> Verdict:
    j = ev["jit"]
    paths = [ev.records[n] for n in ("torchax", "eager", "compile") if n in ev.records]
    best = min(paths, key=lambda r: r["step_ms"])
    ratio = best["step_ms"] / j["step_ms"]
    platform = j.get("platform", "cpu")
    path = f"{best['framework']}/{best['strategy']}"
    nums = {"jax_jit_step_ms": rnd(j["step_ms"]), **{f"{r['framework']}_{r['strategy']}_step_ms": rnd(r["step_ms"])
                                                       for r in paths},
            "pytorch_path_vs_jax_jit": rnd(ratio), "platform": platform, "n_params": j.get("n_params")}
    where = f"on {j.get('device') or platform} ({platform})"
    judged = "pytorch_path_vs_jax_jit"
    caveat = ""
    if platform == "cpu":
        caveat = ("No accelerator here: the PyTorch path is torchax on the CPU, the TPU path run where no TPU is (on a "
                  "CPU most would run torch eager: C7 compares it); run `twinbench claims --only C22` on a TPU or GPU.")
    if platform == "tpu":
        if abs(ratio - 1) <= C22_TIE:
            return Verdict(SUPPORTED, f"{path} takes {ratio:.2f}x jax/jit's step {where}: on a TPU both are XLA "
                           "programs and the two paths meet", nums, caveat, judged)
        who = "JAX still wins" if ratio > 1 else "the PyTorch path wins"
        return Verdict(CONTRADICTED, f"{path} takes {ratio:.2f}x jax/jit's step {where}: {who} on a TPU", nums,
                       caveat, judged)
    if ratio >= 1 + C22_TIE:
        return Verdict(SUPPORTED, f"jax/jit's step is {ratio:.2f}x faster than {path} {where}", nums, caveat, judged)
    if ratio <= 1:
        return Verdict(CONTRADICTED, f"{path} is not slower than jax/jit {where} ({ratio:.2f}x its step): JAX does "
                       "not win here", nums, caveat, judged)
    return Verdict(DEPENDS, f"jax/jit leads {path} by {ratio - 1:.0%} {where}: less than the {C22_TIE:.0%} that "
                   "counts as a win", nums, caveat, judged)


register(Claim("C22", GROUP, "JAX wins unless you go to a TPU: on a TPU PyTorch runs through XLA too (torchax), and "
               "the two meet; on a GPU or CPU jax/jit beats the PyTorch path.", C22_RULE, c22_runs, c22_judge))
