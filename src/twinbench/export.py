"""Run-level use of checkpoints and results: the weights a run starts from (``--init-from``), the weights
``twinbench export`` writes, and the trained weights a results directory saved (``--save-weights``).

``models/hf.py`` is the pure Hugging Face format adapter; this module ties it to RunSpecs and records.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from twinbench.models import family as families
from twinbench.models import weights as canonical
from twinbench.models.hf import FLAG, check_shapes, checkpoint_fields, expected_shapes, load_hf
from twinbench.models.weights import Canonical
from twinbench.record import read_records
from twinbench.spec import RunSpec, SpecError


def initial_weights(spec: RunSpec) -> Canonical:
    """The weights a run starts from when ``init_from`` is set; the checkpoint must fit ``spec.model``."""
    cfg, weights = load_hf(spec.train.init_from)
    ckpt = checkpoint_fields(cfg)
    run = {k: getattr(spec.model, k) for k in ckpt}
    if ckpt != run:
        raise SpecError(f"{FLAG} {spec.train.init_from}: the checkpoint's shape {ckpt} differs from the run's {run}")
    return weights


def export_weights(spec: RunSpec, weights_file: str | Path | None = None) -> tuple[Canonical, str]:
    """The canonical weights ``twinbench export`` writes for ``spec``, and where they came from.

    ``weights_file`` (a canonical safetensors file) if given; else the ``init_from`` checkpoint; else the
    spec's initial weights (its family's init from ``spec.train.seed``, what a run starts from).
    """
    if weights_file:
        p = Path(weights_file)
        if not p.is_file():
            raise SpecError(f"--weights {weights_file}: no such file")
        try:
            w = canonical.load(p)
        except Exception as e:  # not a safetensors file
            raise SpecError(f"--weights {weights_file}: cannot read it as safetensors ({type(e).__name__}: {e})") from None
        w = {k: np.asarray(v, dtype=np.float32) for k, v in w.items()}
        if any(k.startswith(("transformer.", "bert.", "h.0.")) for k in w):
            raise SpecError(f"--weights {weights_file}: this is a Hugging Face checkpoint file, not twinbench's "
                            f"canonical layout; give its directory with --init-from instead")
        check_shapes(w, expected_shapes(spec.model), f"--weights {weights_file} (for --preset {spec.preset})")
        return w, f"--weights {weights_file}"
    if spec.train.init_from:
        return initial_weights(spec), f"--init-from {spec.train.init_from}"
    init = families.get(spec).init_weights
    return init(spec.model, spec.train.seed), f"the initial weights of --preset {spec.preset} --seed {spec.train.seed}"


def weights_from_results(results: str | Path, run: str | None = None) -> tuple[RunSpec, Canonical, str]:
    """The spec and trained weights of a run in a results directory that saved them (``--save-weights``).

    ``run`` picks one run by its label (``torch/eager``) or ``run_id`` when several saved their weights.
    """
    path = Path(results) / "results.jsonl"
    if not path.is_file():
        raise SpecError(f"--from {results}: no results.jsonl there")
    try:
        records, _ = read_records(path)
    except OSError as e:
        raise SpecError(f"--from {results}: cannot read {path} ({e})") from None
    saved = [r for r in records if r.status == "ok" and isinstance(r.outputs.weights_path, str)
             and r.outputs.weights_path]
    if run:
        saved = [r for r in saved if run in (r.run.run_id, f"{r.run.framework}/{r.run.strategy}")]
    own = [r for r in saved if r.value("user_model") or r.value("family") == "user"]
    if own:
        raise SpecError(f"--from {results}: {own[0].label()} is a run of your own "
                        f"model ({own[0].value('user_model') or 'user'}), which export does not write as a "
                        "Hugging Face checkpoint (and never runs)")
    labels = ", ".join(f"{r.run.framework}/{r.run.strategy} ({r.run.run_id})" for r in saved)
    if not saved:
        raise SpecError(f"--from {results}: no successful run{' ' + run if run else ''} saved its weights there; "
                        "run compare with --save-weights DIR first")
    if len(saved) > 1:
        raise SpecError(f"--from {results}: several runs saved weights; choose one with --run: {labels}")
    record = saved[0]
    try:
        spec = RunSpec.from_dict(record.spec)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise SpecError(f"--from {results}: the record's spec is not readable by this version ({e})") from None
    wpath = Path(record.outputs.weights_path)
    if not wpath.exists():
        raise SpecError(f"--from {results}: the weights file {wpath} is gone")
    if not wpath.is_file():  # a device (/dev/zero), a pipe, a folder: never read
        raise SpecError(f"--from {results}: the weights file {wpath} is not a regular file")
    try:
        w = {k: np.asarray(v, dtype=np.float32) for k, v in canonical.load(wpath).items()}
    except Exception as e:  # not a safetensors file
        raise SpecError(f"--from {results}: cannot read {wpath} as safetensors ({type(e).__name__})") from None
    check_shapes(w, expected_shapes(spec.model), f"--from {results}")
    return spec, w, f"the trained weights of {labels} in {results}"
