"""predict's preparation of ``--model`` (and ``--jax-model``): what reading the step's program needs, and no more.

``compare --model`` checks the model before any run (``byo/prepare.py``, in its own process): the loss, the
randomness, 10 eager AdamW steps as the port's reference, its parity. At the sizes people train (BERT-base,
batch 32 x 128) those are real training steps on this CPU: minutes and gigabytes, none of which predict uses,
since it runs no step. Here the module is built once, in its own process (``build(cfg)`` under the run's seed,
dropout off; a model that hangs ends at ``--timeout``), its batch 0 checked for its shapes, and the initial weights and ``meta.json`` written where the trainers read them
(``byo/family.py``): the torch step is then traced on fake tensors (``torch_ops.py``) and the JAX step
(torchax, or the port) lowered from state traced under ``jax.eval_shape`` (``program.py``), as for the twins.
A port is not checked against the module here: ``compare --model ... --jax-model`` does that.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from twinbench.spec import RunSpec


def prepare(specs: list[RunSpec], out_dir: Path, timeout: float,
            say: Callable[[str], None] = lambda line: None) -> list[RunSpec]:
    """The specs pointing at ``out_dir/byo``, holding the initial weights and ``meta.json`` of the user's model,
    built once in its own process (``python -m twinbench.predict.user``: a model that hangs at import ends at
    ``timeout`` in one line); a problem with the user's file is a SpecError (one line, exit 2)."""
    if not any(s.user.user_model for s in specs):
        return specs
    from twinbench.byo.plan import run_child

    spec = specs[0]
    target = (out_dir / "byo").resolve()
    target.mkdir(parents=True, exist_ok=True)
    say(f"building your model ({spec.user.user_model}) at {spec.preset}'s shape, batch {spec.train.batch} x "
        f"{spec.train.seq}, in its own process")
    run_child("twinbench.predict.user", spec, target, timeout,
              f"--model {spec.user.user_model}: building the model failed")
    from twinbench.byo import family as fam

    n = fam.read_meta(target).n_params
    say(f"built: {n / 1e6:.1f}M parameters; no training step is run (the step is traced)")
    return [s.evolve(user_dir=str(target)) for s in specs]


def build(spec: RunSpec, target: Path) -> None:
    """In the building process: ``build(cfg)`` under the run's seed, dropout off, batch 0's shapes checked, the
    initial weights and ``meta.json`` written to ``target`` (a UserModelError for a bad file)."""
    import torch
    from safetensors.numpy import save_file

    from twinbench.byo import family as fam
    from twinbench.byo import load_torch
    from twinbench.byo.prepare import check_batch, meta_of
    from twinbench.byo.randomness import switch_off

    ref = spec.user.user_model
    torch.manual_seed(spec.train.seed)
    um = load_torch(ref, fam.config(spec))
    x, y = check_batch(um, ref)
    switched = switch_off(um.module)
    um.module.train()
    save_file(fam.state_numpy(um.module), str(target / fam.INIT))
    fam.write_meta(target, meta_of(um, ref, x, y, switched))


def main(argv: list[str]) -> int:
    from twinbench.byo.prepare import child

    return child(argv, build)  # ends with predict, even when it is killed


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
