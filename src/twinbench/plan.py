"""From flags to validated RunSpecs: the one recipe every command that runs specs follows.

``compare``, ``sweep`` and ``advise`` select (framework, strategy) pairs, build one spec per pair from the preset
and the flags, and check each (unknown names, modifiers that do not apply, cells of the strategy matrix that
cannot exist, ``--devices`` against the strategy); ``export`` builds the spec of one model; ``--cache`` expands
specs into compile-cache states. The CLI parses flags and renders results; it builds no spec itself.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from twinbench.models.family import FAMILIES
from twinbench.spec import (
    RunSpec,
    SpecError,
    check_framework_options,
    from_preset,
    one_of,
    validate,
    with_precision,
)

#: one flag's value for a spec field (``--batch 8``, ``--attention-impl splash``, ``--slow-input 2.5``)
Override = bool | int | float | str | None
#: the flags' values by spec field name (model and train sections alike; ``spec.from_preset`` routes each)
Overrides = dict[str, Override]


@dataclass(frozen=True)
class RunFields:
    """The RunSpec fields a command sets on every run beside the preset and the flags' overrides: ``--trace``'s
    directory, ``--model``/``--jax-model`` and ``--threads`` (empty or 0: not set, the spec's default)."""

    trace_dir: str = ""  # an absolute path: the worker may run elsewhere
    user_model: str = ""  # FILE.py:build
    user_jax_model: str = ""
    threads: int = 0

    def kwargs(self) -> dict[str, str | int]:
        """The fields set, as ``from_preset``'s keywords."""
        return {k: v for k, v in asdict(self).items() if v}


def csv(value: str | None) -> list[str] | None:
    """``"a, b,"`` -> ``["a", "b"]``; None or empty -> None."""
    return [v.strip() for v in value.split(",") if v.strip()] if value else None


def model_spec(preset: str, overrides: Overrides | None = None, **top: Any) -> RunSpec:
    """The validated spec of one model and training setup (no strategy chosen: ``export``)."""
    return validate(from_preset(preset, overrides, **top))


def run_spec(preset: str, framework: str, strategy: str, overrides: Overrides | None = None,
             **top: Any) -> RunSpec:
    """One validated, runnable spec of a registered strategy (the checks of :func:`build_specs`)."""
    from twinbench.strategies import registry

    spec = validate(with_precision(from_preset(preset, overrides, framework=framework, strategy=strategy, **top)))
    registry.get(spec.framework, spec.strategy.name)
    registry.check_devices(spec)
    return spec


def check_inputs(spec: RunSpec) -> None:
    """The files a spec reads, checked before any run (SpecError, one line): ``init_from``'s weights (truncated
    or foreign: one line now, not a failure of every run) and ``data`` (a bad data file is a user error). Every
    path from flags, a ``--try`` variant or a sweep point to a run passes here."""
    if spec.train.init_from:
        from twinbench.models.hf import check_weights

        check_weights(spec.train.init_from)
    if spec.train.data:  # as its task reads it (tasks/)
        from twinbench.tasks import TASKS

        TASKS[spec.train.task].read_data(spec)


def build_specs(preset: str, frameworks: str, strategies: str | None, overrides: Overrides,
                user_model: str | None = None, user_jax_model: str | None = None, **top: Any) -> list[RunSpec]:
    """One validated RunSpec per selected (framework, strategy); ``user_model`` (``--model FILE.py:build``): the
    user's own model's runs (twinbench/byo), with its port ``user_jax_model``; ``top``: other RunSpec fields
    (:meth:`RunFields.kwargs`)."""
    from twinbench.strategies import registry

    fws = csv(frameworks) or []
    if strategies is not None and not csv(strategies):  # '' or ',': named, and empty (None is: every one)
        raise SpecError(f"--strategies {strategies!r}: names no strategy; give one or more, as "
                        "'twinbench strategies' lists them (torch:eager,jax:jit), or leave the flag out")
    from twinbench.distributed.cluster import fill_from_cluster

    overrides = fill_from_cluster(overrides)  # inside a SLURM step of several tasks: this task's place in the run
    if user_model:  # --model FILE.py:build: the user's own model (twinbench/byo)
        from twinbench.byo import plan as byo_plan

        return byo_plan.build_specs(preset, fws, csv(strategies), overrides, user_model, user_jax_model or "", **top)
    if user_jax_model:
        raise SpecError("--jax-model: a JAX port is measured beside its torch model: give --model FILE.py:build too")
    chosen = registry.select(fws, csv(strategies))
    if not chosen:
        raise SpecError(f"--strategies: nothing selected for --framework {frameworks}")
    base = validate(from_preset(preset, overrides, **top))
    check_inputs(base)
    if csv(strategies) in (None, ["all"]) and base.model.family in FAMILIES:  # the cells the family can run
        chosen = registry.for_family(FAMILIES[base.model.family], chosen)
    specs = [validate(with_precision(base.evolve(framework=fw, strategy=name)))
             for fw, name in chosen]
    for s in specs:  # --precision bf16 may have added +bf16: it must fit the strategy too
        registry.get(s.framework, s.strategy.name)
        registry.check_devices(s)  # --devices > 1 needs a multi-device strategy
        check_framework_options(s)
    return list({(s.framework, s.strategy.name): s for s in specs}.values())


def repeat_rounds(specs: list[RunSpec], repeats: int) -> list[list[RunSpec]]:
    """``repeats`` rounds of ``specs``, round k marked ``repeat=k``: run in order they are interleaved (A B C,
    A B C, ...), so host drift falls on every configuration alike. ``compare --repeats`` and the claims suite."""
    if repeats < 1:
        raise SpecError(f"--repeats must be a positive integer, got {repeats}")
    from twinbench.limits import check_runs

    check_runs(len(specs) * repeats, "--repeats", repeats)  # a billion repeats: one line, before a spec of them is built
    return [[replace(s, repeat=k) for s in specs] for k in range(repeats)]


def with_cache(specs: list[RunSpec], cache: str, cache_dir: Path | None) -> list[RunSpec]:
    """Each spec in the cache state(s) of ``--cache``, under the ``--cache-dir`` root (see compile_cache.py)."""
    from twinbench import compile_cache

    one_of("cache", cache, compile_cache.MODES)
    root = cache_dir.expanduser().resolve() if cache_dir else compile_cache.default_root()
    return compile_cache.expand(specs, cache, root)
