"""What this machine (or a target device) can hold, checked in the parent before anything is built.

The worker's preflight (``measure/memory.py``) estimates a run's memory once its model is built; a model too
large to build at all (``--layers 100000``) never reaches it: building it exhausts the host first. So the
commands that run or read specs (compare, sweep, advise, explain, predict) first compare a *lower bound* from the
shapes alone against the memory there is, and refuse, in one line, what cannot fit. A lower bound: a run it
refuses could never have fitted; one it lets through meets the worker's preflight as before.

The bound counts only what every twin certainly holds: the parameters (embeddings and, per layer, at least two
``d_model x d_model`` and two ``d_model x d_ff`` matrices), their gradients and AdamW's two moments, the logits
of one step and one activation per layer and token. ``--no-preflight`` skips the check as it skips the
worker's. A user's own model (``--model``) is not checked: its insides are not known from the preset.
"""

from __future__ import annotations

import os
from collections.abc import Collection
from typing import Any

from twinbench.config import SpecError
from twinbench.tasks import of as task_of

GiB = 2**30


def cores() -> int:
    """The cores this process may run on (its CPU affinity)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def params_lower_bound(spec: Any) -> int:
    """Parameters the model has at least, from its shape (embeddings + two square and two FF matrices a layer)."""
    m = spec.model
    return m.vocab * m.d_model + m.layers * (2 * m.d_model * m.d_model + 2 * m.d_model * m.ff)


def step_lower_bound(spec: Any) -> int:
    """Bytes one training step holds at least: parameters, gradients, AdamW's two moments, the logits of the
    step (a language model's: one row of the vocabulary per token) and one activation per layer and token, at
    the run's precision."""
    itemsize = 2 if spec.train.precision == "bf16" else 4
    tokens = spec.train.batch * spec.train.seq
    m = spec.model
    # a next-token task's logits: a row of the vocabulary per token (a classifier's head gives a few per sequence)
    logits = tokens * m.vocab if getattr(task_of(spec.train.task), "next_token", False) else 0
    return itemsize * (4 * params_lower_bound(spec) + logits + m.layers * tokens * m.d_model)


def gib(n: float) -> str:
    """``n`` bytes in GiB, readable at any size (a 300-digit count too)."""
    try:
        g = n / GiB
    except OverflowError:  # an int beyond a float: its order of magnitude
        return f"~1e{len(str(int(n) // GiB)) - 1} GiB"
    return f"{g:.1f} GiB" if g < 1e6 else f"{g:.2g} GiB"


def _accelerator_here() -> bool:
    """Whether runs keep their state on an accelerator (a visible NVIDIA GPU, a TPU, JAX_PLATFORMS naming one)."""
    from twinbench.measure import device, platforms

    named = os.environ.get("JAX_PLATFORMS", "")
    if any(p in named for p in ("tpu", "cuda", "gpu", "rocm")):
        return True
    return device.gpu_count() > 0 or platforms.here() != "cpu"


def count(n: int) -> str:
    """A count of any size, short: ``4.9e+09``; a 300-digit one as ``~1e299``."""
    try:
        return f"{n:.3g}"
    except OverflowError:
        return f"~1e{len(str(int(n))) - 1}"


def changed(spec: Any) -> str:
    """The shape fields of ``spec`` that differ from its preset, as ``layers=100000, batch=8`` ('' for none)."""
    from twinbench.spec import PRESETS

    if spec.preset not in PRESETS:
        return ""
    model, train = PRESETS[spec.preset]
    def v(x: int) -> str:
        return str(x) if abs(x) < 10**12 else count(x)

    diffs = [f"{k}={v(getattr(spec.model, k))}" for k in ("layers", "d_model", "d_ff", "vocab", "context")
             if getattr(spec.model, k) != getattr(model, k)]
    diffs += [f"{k}={v(getattr(spec.train, k))}" for k in ("batch", "seq")
              if getattr(spec.train, k) != getattr(train, k)]
    return ", ".join(diffs)


def _sizes(spec: Any) -> str:
    return (f"{count(params_lower_bound(spec))} parameters or more, "
            f"{count(spec.train.batch * spec.train.seq)} tokens a step")


def _shape(spec: Any) -> str:
    what = changed(spec)
    return f"--preset {spec.preset}" + (f" with {what}" if what else "")


#: the most steps a planned training run may have (``--plan-steps``, advice.json's ``plan_steps``): a trillion
#: steps is a run of years at a microsecond a step; more overflows the totals the report plots
MAX_PLAN_STEPS = 10**12
#: the most devices a prediction's data-parallel curve may reach (``predict --devices``): 2^20, past every
#: machine built; a run's own ``--devices`` is bounded by the devices it sees and by its batch
MAX_DEVICES = 2**20

#: host bytes a run keeps per training step until it ends, at most: the step's time and its loss as Python floats
#: in lists, and each written into the record's JSON (the loss handles, a device scalar each, are read back a few
#: hundred at a time: measure.clock.HANDLES_HELD), and a classifier's three token counts (data.tasks.Counts, 24 B)
#: (``--steps``' bound, with the task's per-example bytes: the indices data.text.Draws keeps)
PER_STEP_BYTES = 256
#: host bytes twinbench keeps per run it schedules (its spec, its record, its row of the table), at most: the
#: bound of ``--repeats`` and of a sweep's grid
PER_RUN_BYTES = 64 << 10
#: the share of the available memory a count's bookkeeping may take (the rest is the runs' own)
BOOKKEEPING_SHARE = 4
#: the environment variable that sets the cap on a --data file (a whole number of MB)
MAX_DATA_ENV = "TWINBENCH_MAX_DATA_MB"


def _available(available: int | None = None) -> int:
    from twinbench.measure.memory import host_available_bytes

    return host_available_bytes() if available is None else available


def max_data_bytes(available: int | None = None) -> int:
    """The largest ``--data`` file a run reads (held whole, as bytes, once; a JSONL file as examples several
    times its size): :data:`MAX_DATA_ENV`, else an eighth of the memory available now (at least 64 MiB)."""
    raw = os.environ.get(MAX_DATA_ENV, "")
    if raw.isdigit() and int(raw) > 0:
        return int(raw) << 20
    return max(_available(available) // 8, 64 << 20)


def data_refusal(flag: str, path: Any, cap: int) -> str:
    """The line refusing a data file over ``cap`` bytes (its size read from the file)."""
    try:
        size = os.stat(path).st_size
    except OSError:
        size = cap + 1
    return (f"{flag}: {gib(size)}, over the {gib(cap)} a data file may hold on this host (a share of the memory "
            f"available now; {MAX_DATA_ENV} sets it)")


def check_count(n: Any, flag: str, per_item: int, what: str, available: int | None = None,
                given: Any = None) -> None:
    """Refuse (SpecError) a count whose bookkeeping (``per_item`` bytes each) cannot fit in a
    :data:`BOOKKEEPING_SHARE`-th of the host's available memory, before anything of it is allocated: one line
    naming ``flag`` (and the value ``given`` there, when ``n`` is computed from it), the figure it would need and
    the largest count allowed here."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise SpecError(f"{flag} must be a positive integer, got {count(n) if isinstance(n, int) else n!r}")
    avail = _available(available)
    most = max(avail // BOOKKEEPING_SHARE // per_item, 1)
    if n > most:
        sep = "" if flag.endswith("=") else " "  # --over steps=1e+30
        head = f"{flag}{sep}{count(n)}" if given is None else f"{flag}{sep}{count(given)} ({count(n)} in all)"
        raise SpecError(f"{head}: {what} ~{per_item} bytes each, {gib(n * per_item)} in all, and this host has "
                        f"{gib(avail)} available; at most {count(most)}{' in all' if given is not None else ''} here")


def check_steps(spec: Any, available: int | None = None, flag: str = "--steps") -> None:
    """``--steps`` within what the host can keep a step of (:data:`PER_STEP_BYTES`, and a classification
    run's drawn example indices); ``flag``: the flag that gave the steps (a sweep's ``--over steps=``)."""
    per = PER_STEP_BYTES + getattr(task_of(spec.train.task), "bytes_per_example", 0) * spec.train.batch
    check_count(spec.train.steps, flag, per, "a run keeps its steps' times and losses until it ends,",
                available)


def check_runs(n: int, flag: str, given: Any = None, available: int | None = None) -> None:
    """``n`` runs (``--repeats`` times the configurations, a sweep's grid points) within what twinbench can keep
    a run of (:data:`PER_RUN_BYTES`), checked before any spec of them is built; ``given``: the flag's value."""
    check_count(n, flag, PER_RUN_BYTES, "twinbench keeps a spec and a record a run,", available, given)


def check_host(specs: list[Any], available: int | None = None, swept: Collection[str] = ()) -> None:
    """Refuse (SpecError) a run the host cannot build, or (without an accelerator) cannot train, before any
    process starts; ``--steps`` whose bookkeeping the host cannot keep; and ``--threads`` above this machine's
    cores. ``swept``: the fields a sweep's ``--over`` gave (a refusal names that flag, not one never given)."""
    from twinbench.measure.memory import host_available_bytes
    from twinbench.spec import USER

    n = cores()
    for s in specs:
        if s.host.threads > n:
            raise SpecError(f"--threads {s.host.threads}: this machine gives twinbench {n} cores; allowed: 0 (all) "
                            f"to {n}")
    todo = [s for s in specs if not s.no_preflight and s.model.family != USER]
    avail = (host_available_bytes() if available is None else available) if todo else 0
    on_host = not _accelerator_here()
    for s in todo:  # the shape first: a batch no step can hold is the flag to blame, not the steps it would count
        need = step_lower_bound(s) if on_host else 4 * params_lower_bound(s)  # the canonical weights, in fp32
        if need > avail:
            what = "one training step needs" if on_host else "its initial weights alone need"
            raise SpecError(f"{_shape(s)}: {what} at least {gib(need)} ({_sizes(s)}), the host has {gib(avail)} "
                            "available; nothing was run (a smaller shape, or --no-preflight to try anyway)")
    checked: set[tuple[int, int, str]] = set()
    for s in specs:
        if (key := (s.train.steps, s.train.batch, s.train.task)) not in checked:
            checked.add(key)
            check_steps(s, available, "--over steps=" if "steps" in swept else "--steps")


def check_device(spec: Any, device_label: str, memory_bytes: float, devices: int = 1) -> None:
    """Refuse (SpecError) predicting a step that ``devices`` such devices together cannot hold (so no strategy,
    fully sharded or not, could run it there): reading its program would cost this host for nothing."""
    from twinbench.spec import USER

    if spec.no_preflight or spec.model.family == USER:
        return
    need = step_lower_bound(spec)
    if need > memory_bytes * max(devices, 1):
        where = f"one {device_label} has" if devices <= 1 else f"{devices} x {device_label} have"
        raise SpecError(f"{_shape(spec)}: one training step needs at least {gib(need)} ({_sizes(spec)}), {where} "
                        f"{gib(memory_bytes * max(devices, 1))}: it cannot run there, so no program was read (a "
                        "smaller shape, or --no-preflight to read it anyway)")


def check_weights(spec: Any, available: int | None = None) -> None:
    """Refuse (SpecError) building a model's weights on this host (``export``) when they cannot fit: 4 bytes a
    parameter, at least."""
    from twinbench.measure.memory import host_available_bytes

    avail = host_available_bytes() if available is None else available
    need = 4 * params_lower_bound(spec)
    if need > avail:
        raise SpecError(f"{_shape(spec)}: its weights alone need at least {gib(need)} "
                        f"({count(params_lower_bound(spec))} parameters or more), the host has {gib(avail)} "
                        "available; nothing was built")
