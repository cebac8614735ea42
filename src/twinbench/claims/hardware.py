"""C22, the hardware: JAX wins unless you go to a TPU, where PyTorch runs through XLA too.

The experiment is the PyTorch path to the machine's accelerator against jax/jit, on the same GPT twin, the same
weights and batches: on a TPU the torch module under torchax (``jax:torchax``: PyTorch code compiled by XLA, as
torch has no TPU runtime of its own here), on a GPU CUDA eager and ``torch.compile`` (the best of the two), on a
CPU torchax as the fallback (the TPU path, run where no accelerator is). On an accelerator both run in bf16
(``+bf16``, how one trains there), on a CPU in fp32 (bf16 is emulated on a CPU).
"""

from __future__ import annotations

from pathlib import Path

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
from twinbench.claims.result import Numbers
from twinbench.record import Record
from twinbench.spec import RunSpec

GROUP = "hardware"
#: |PyTorch path / jax:jit - 1| within this: the two meet (a TPU's answer); JAX ahead by at least this: it wins.
C22_TIE = 0.10
C22_RULE = (f"ratio = best PyTorch-path step / jax/jit step (TPU: jax/torchax; GPU: the best of torch/eager, "
            f"torch/compile; CPU: jax/torchax as the fallback), at each size measured (an accelerator: GPT-2 124M and "
            f"the ~300M Llama at 8 x 1024, bf16). On a TPU: |ratio - 1| <= {C22_TIE:.0%} supported (the paths meet), "
            f"ratio > {1 + C22_TIE:.2f} contradicted (JAX still wins), ratio < {1 - C22_TIE:.2f} contradicted (PyTorch "
            f"wins). Elsewhere: ratio >= {1 + C22_TIE:.2f} supported (JAX wins), ratio <= 1 contradicted, in between "
            "depends. Sizes that disagree: depends (the size where the answer flips). A gap above "
            f"{C22_TIE:.0%} names explain's op-by-op reason when the runs were traced, else the command that gives it.")
PATHS = ("torchax", "eager", "compile")


def c22_runs(s: Setup) -> dict[str, RunSpec]:
    sizes = list(dict.fromkeys((s.gpt, s.big))) if s.accelerator else [s.gpt]  # a CPU: two short runs
    runs: dict[str, RunSpec] = {}
    for preset in sizes:
        runs[f"jit@{preset}"] = s.spec("jax", "jit", preset)
        if s.platform == "gpu":
            runs |= {f"eager@{preset}": s.spec("torch", "eager", preset),
                     f"compile@{preset}": s.spec("torch", "compile", preset)}
        else:  # a TPU's path (s.spec makes torch there torchax); a CPU runs it too, as the fallback
            runs[f"torchax@{preset}"] = s.spec("jax", "torchax", preset)
    return runs


def one_size(j: Record, paths: list[Record]) -> tuple[str, float, Record]:
    """(the verdict word at one size, the ratio, the best PyTorch-path record)."""
    best = min(paths, key=lambda r: r.timing.step_ms)
    ratio = best.timing.step_ms / j.timing.step_ms
    if (j.conditions.platform or "cpu") == "tpu":
        return (SUPPORTED if abs(ratio - 1) <= C22_TIE else CONTRADICTED), ratio, best
    return (SUPPORTED if ratio >= 1 + C22_TIE else CONTRADICTED if ratio <= 1 else DEPENDS), ratio, best


def traced_reason(j: Record, best: Record) -> str:
    """explain's reason from the two records' traces (``claims --trace``): its summary of the gap by phase and
    category, and the slower run's largest kernels in the rows that carry it, op by op."""
    from twinbench.explain import gap

    sides = [gap.explain_trace(r.trace.path, hlo=r.explain.hlo_path) for r in (j, best)]
    result = gap.pair(*sides)
    slow = result.b if result.b is not None and result.gap_ms >= 0 else result.a
    sign = 1 if result.gap_ms >= 0 else -1
    top = sorted((r for r in result.rows if r.level == 1), key=lambda r: -sign * r.diff_ms)[:3]
    rows = {r.row for r in top if sign * r.diff_ms > 0}
    ops = [k for k in slow.kernels if f"{k.phase} / {k.category}" in rows][:4]
    said = "; ".join(f"{k.op or k.name} ({k.phase} {k.category}) {k.ms:.1f} ms" for k in ops)
    named = not result.gates  # explain named no row when its evidence checks failed: no kernels of one
    return f"explain: {result.summary}" + (f"; the largest of those kernels: {said}" if said and named else "")


def reason(j: Record, best: Record) -> str:
    """explain's op-by-op reason for the gap between two runs: from their traces when both records carry one
    (``claims --trace``), else the command that runs both again with one."""
    why = ""
    if all(r.trace.path and Path(r.trace.path).exists() for r in (j, best)):
        try:
            return traced_reason(j, best)
        except Exception as e:  # an unreadable trace: the command still gives the reason
            why = f" (the traces could not be read: {type(e).__name__})"
    attn = f" --attention-impl {j.run.attention_impl}" if j.run.attention_impl not in (None, "default") else ""
    return (f"`twinbench explain {best.run.framework}:{best.run.strategy} jax:{j.run.strategy} --preset {j.run.preset}"
            f"{attn}` gives the op-by-op reason{why}")


def c22_judge(ev: Evidence) -> Verdict:
    sizes = [n.split("@", 1)[1] for n in ev.records if n.startswith("jit@")]
    nums: Numbers = {}
    per: list[tuple[str, str, float, Record, Record]] = []
    for preset in sizes:
        j = ev[f"jit@{preset}"]
        paths = [ev.records[f"{n}@{preset}"] for n in PATHS if f"{n}@{preset}" in ev.records]
        word, ratio, best = one_size(j, paths)
        per.append((preset, word, ratio, j, best))
        nums |= {f"jax_jit_step_ms@{preset}": rnd(j.timing.step_ms),
                 **{f"{r.run.framework}_{r.run.strategy}_step_ms@{preset}": rnd(r.timing.step_ms) for r in paths},
                 f"pytorch_path_vs_jax_jit@{preset}": rnd(ratio), f"n_params@{preset}": j.run.n_params}
    j0 = per[0][3]
    platform = j0.conditions.platform or "cpu"
    nums["platform"] = platform
    if len(per) == 1:  # one size: the plain names (the CPU's suite)
        nums = {k.split("@")[0]: v for k, v in nums.items()}
    where = f"on {j0.run.device or platform} ({platform})"
    judged = ",".join(f"pytorch_path_vs_jax_jit@{p}" for p, *_ in per) if len(per) > 1 else "pytorch_path_vs_jax_jit"
    caveat = ""
    if platform == "cpu":
        caveat = ("No accelerator here: the PyTorch path is torchax on the CPU, the TPU path run where no TPU is (on a "
                  "CPU most would run torch eager: C7 compares it); run `twinbench claims --only C22` on a TPU or GPU.")

    def text(preset: str, ratio: float, j: Record, best: Record) -> str:
        t = f"{best.run.framework}/{best.run.strategy} takes {ratio:.2f}x jax/jit's step at {preset}"
        if platform != "cpu" and abs(ratio - 1) > C22_TIE:
            t += f" ({reason(j, best)})"
        return t

    parts = "; ".join(text(p, r, j, b) for p, _, r, j, b in per) + f" {where}"
    words = {w for _, w, *_ in per}
    if len(words) > 1:
        meet = [p for p, w, *_ in per if w == SUPPORTED]
        return Verdict(DEPENDS, f"the answer depends on the size ({', '.join(f'{p}: {w}' for p, w, *_ in per)}; "
                       f"supported at {', '.join(meet) or 'none'}): {parts}", nums, caveat, judged)
    word = words.pop()
    if platform == "tpu":
        if word == SUPPORTED:
            return Verdict(SUPPORTED, f"{parts}: on a TPU both are XLA programs and the two paths meet", nums, caveat,
                           judged)
        who = {r > 1 for _, _, r, _, _ in per}
        winner = "JAX still wins" if who == {True} else "the PyTorch path wins" if who == {False} else "no one path wins"
        return Verdict(CONTRADICTED, f"{parts}: {winner} on a TPU", nums, caveat, judged)
    if word == SUPPORTED:
        return Verdict(SUPPORTED, f"jax/jit's step is faster: {parts}", nums, caveat, judged)
    if word == CONTRADICTED:
        return Verdict(CONTRADICTED, f"the PyTorch path is not slower than jax/jit: {parts}: JAX does not win here",
                       nums, caveat, judged)
    return Verdict(DEPENDS, f"jax/jit leads by less than the {C22_TIE:.0%} that counts as a win: {parts}", nums, caveat,
                   judged)


register(Claim("C22", GROUP, "JAX wins unless you go to a TPU: on a TPU PyTorch runs through XLA too (torchax), and "
               "the two meet; on a GPU or CPU jax/jit beats the PyTorch path.", C22_RULE, c22_runs, c22_judge,
               traced=True))
