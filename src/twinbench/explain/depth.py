"""Fusion work that grows faster than the layer count: the JAX step compiled at two depths, its operations
counted per layer.

A step whose every layer compiles to the same fusions has per-layer counts that stay flat (or fall: the
embedding, head and update are shared by all layers) as layers are added. When some (phase, category,
opcode) count *per layer* rises with depth, each new layer makes every layer's compiled code larger: a
layer-norm backward whose fusions recompute across layers, a gradient summed through a growing chain. Such
growth is invisible at one depth and slows deep models; the compiled program, not the model, causes it.

``explain --depths 2,4`` compiles (does not run) each JAX side's step at those depths in a fresh process
(``python -m twinbench.explain.depth``), counts the operations inside the executed instructions (fusions
opened), and names the counts whose per-layer value rose by more than ``GROWTH`` (25%).
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from twinbench.explain import hlo
from twinbench.explain.flops import parse_hlo
from twinbench.explain.result import Depth, Explained, Growth

if TYPE_CHECKING:
    from twinbench.spec import RunSpec

GROWTH = 0.25  # a per-layer count rising by more than this share grows faster than the layer count
MIN_EXCESS = 16  # ... and by at least this many operations beyond linear growth


def counts(text: str) -> Counter[tuple[str, str, str]]:
    """(phase, category, opcode) -> operations inside the step's executed instructions (fusions opened)."""
    instrs = hlo.parse(text)
    table = parse_hlo(text)
    fused = {i.calls for i in table.values() if i.opcode == "fusion" and i.calls}
    out: Counter[tuple[str, str, str]] = Counter()
    for name, t in table.items():
        if t.comp in fused:
            continue
        ins = instrs.get(name)
        if ins is None:
            continue
        phase, cat = hlo.phase_of(ins), hlo.category(ins)
        for op in ins.opcodes or [ins.opcode]:
            out[phase, cat, op] += 1
    return out


def growth(by_depth: dict[int, str]) -> list[Growth]:
    """The counts whose per-layer value rose from the shallowest to the deepest depth, largest excess first:
    ``excess`` is what the deeper step has beyond the shallower one's count scaled linearly."""
    if len(by_depth) < 2:
        return []
    (d1, t1), (d2, t2) = sorted(by_depth.items())[0], sorted(by_depth.items())[-1]
    c1, c2 = counts(t1), counts(t2)
    out = []
    for key in set(c1) | set(c2):
        n1, n2 = c1.get(key, 0), c2.get(key, 0)
        excess = n2 - n1 * d2 / d1
        if n1 and n2 / d2 > (1 + GROWTH) * n1 / d1 and excess >= MIN_EXCESS:
            out.append(Growth(phase=key[0], category=key[1], opcode=key[2], depths=[d1, d2], counts=[n1, n2],
                              per_layer=[n1 / d1, n2 / d2], excess=excess))
    return sorted(out, key=lambda f: -f.excess)


def sentence(run: str, found: list[Growth]) -> str:
    if not found:
        return f"{run}: the compiled step's work per layer does not grow with depth"
    top = found[:3]
    what = "; ".join(f"{f.phase} {f.category} {f.opcode} {f.counts[0]} -> {f.counts[1]} "
                     f"({f.per_layer[0]:.0f} -> {f.per_layer[1]:.0f} per layer)" for f in top)
    d1, d2 = top[0].depths
    return (f"{run}: compiled work grows faster than the layer count from {d1} to {d2} layers: {what}; each added "
            "layer enlarges every layer's fusions (a cause in the compiled program, not the model)")


def preflight(depths: list[int], sides: list[RunSpec]) -> None:
    """Each JAX side at each of ``depths``, before any run: validated and its shape checked against the host's
    memory as compare's runs are (SpecError, one line: ``--depths 2,100000`` never starts compiling)."""
    from dataclasses import replace

    from twinbench import backends
    from twinbench.limits import check_host
    from twinbench.spec import SpecError, validate

    for side in sides:
        if not backends.get(side.framework).STEP_PROGRAM_TEXT:
            continue
        for d in depths:
            spec = replace(side, model=replace(side.model, layers=d))
            try:
                check_host([validate(spec)])
            except SpecError as e:
                raise SpecError(f"--depths {d}: {e}") from None


def compile_at(spec_dict: dict[str, Any], depths: list[int], out_dir: Path, timeout: float) -> dict[int, str]:
    """The JAX step's HLO text at each depth, compiled in a fresh process (``runner.run_module``). A user
    model (``--model``) gets its initial weights at each depth first (``twinbench.byo.prepare``)."""
    from twinbench import runner
    from twinbench.folder_io import write_file
    from twinbench.spec_sections import flat_spec

    spec_dict = flat_spec(spec_dict)  # either version: the flat form sets trace_dir, explain, user_dir by name
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for d in depths:
        spec = {**spec_dict, "model": {**spec_dict["model"], "layers": d}, "trace_dir": None, "explain": False}
        path = out_dir / f"layers{d}.spec.json"
        if spec["model"].get("family") == "user":
            target = (out_dir / f"byo-layers{d}").resolve()
            spec["user_dir"] = str(target)
            write_file(out_dir, path.name, json.dumps(spec))
            code, reason = runner.run_module("twinbench.byo.prepare", [str(path), str(target)], timeout)
            if code:
                raise RuntimeError(f"preparing the model at {d} layers failed: {reason}")
        write_file(out_dir, path.name, json.dumps(spec))  # never through a link in the folder
        paths.append(str(path))
    code, reason = runner.run_module("twinbench.explain.depth", [str(out_dir), *paths], timeout)
    if code != 0:
        raise RuntimeError(f"compiling at depths {depths} failed: {reason}")
    return {d: (out_dir / f"layers{d}.hlo.txt").read_text() for d in depths}


def _main(argv: list[str]) -> int:
    from twinbench.spec import RunSpec
    from twinbench.worker import build, prepare_process

    for i, spec_path in enumerate(argv[1:]):
        spec = RunSpec.from_dict(json.loads(Path(spec_path).read_text()))
        if i == 0:
            prepare_process(spec)
        b = build(spec)
        x, y = b.run_data.batches[0]
        Path(argv[0], f"layers{spec.model.layers}.hlo.txt").write_text(b.trainer.explain_hlo(x, y))
    return 0


if __name__ == "__main__":  # pragma: no cover - run by compile_at in a fresh process
    sys.exit(_main(sys.argv[1:]))


def for_pair(result: Explained, depths: list[int], out_dir: Path, timeout: float) -> list[Depth]:
    """``explain --depths``: each JAX side of an explained pair compiled at ``depths``, its growth named."""
    from twinbench import backends
    from twinbench.spec import RunSpec

    out = []
    for (letter, side), spec in zip((("a", result.a), ("b", result.b)), result.specs, strict=False):
        if not spec or side is None or not backends.get(RunSpec.from_dict(spec).framework).STEP_PROGRAM_TEXT:
            continue
        try:
            found = growth(compile_at(spec, depths, out_dir / f"depth-{letter}", timeout))
            out.append(Depth(run=side.run, growth=found, sentence=sentence(side.run, found)))
        except (RuntimeError, OSError) as e:
            out.append(Depth(run=side.run, growth=[], sentence=f"{side.run}: {e}"))
    return out
