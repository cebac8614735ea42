"""What a run's memory is measured from; how it is split into parts and reported is ``memory.py``.

The readings: the process's resident memory and the host's available memory (Linux ``/proc``), the bytes of
live arrays and tensors (a trainer's parameters and optimizer state, a batch), a compiled JAX step's
``memory_analysis()`` and the residuals its loss's VJP keeps, the free memory of a JAX device, and for torch the
tensors autograd saves in a step and what its memory profiler counts alive at the peak of one profiled step.
Like ``memory.py``, it reads arrays, compiled programs and trainers it is given and never imports the models.
"""

from __future__ import annotations

import os
import resource
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

from twinbench.measure import platforms
from twinbench.strategies.base import JaxStepTrainer


def rss_bytes() -> int:
    """The process's resident memory now (Linux /proc; the peak RSS elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def host_available_bytes() -> int:
    """MemAvailable of /proc/meminfo (what the kernel could give without swapping); total RAM elsewhere."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def nbytes(leaves: Iterable[Any]) -> int:
    """Sum of ``nbytes`` over arrays/tensors (anything else counts 0)."""
    total = 0
    for x in leaves:
        n = getattr(x, "nbytes", None)
        if n is None and hasattr(x, "element_size"):  # torch before nbytes
            n = x.element_size() * x.numel()
        total += int(n or 0)
    return total


def jax_compiled_sizes(jitted: Any, *args: Any) -> dict[str, int]:
    """``memory_analysis()`` of ``jitted`` compiled for ``args`` (abstract shapes suffice): argument, output,
    alias and temp bytes. Nothing is executed; with a warm compilation cache nothing is recompiled."""
    return compiled_sizes(jitted.lower(*args).compile())


def compiled_sizes(compiled: Any) -> dict[str, int]:
    """A compiled program's ``memory_analysis()``: argument, output, alias, temp and generated code bytes."""
    ma = compiled.memory_analysis()
    names = ("argument", "output", "alias", "temp", "generated_code")
    return {n: int(getattr(ma, f"{n}_size_in_bytes", 0) or 0) for n in names} if ma is not None else {}


def jax_step_estimate(sizes: dict[str, int]) -> int:
    """Device/host bytes one step needs at its peak: arguments + outputs not aliased to them + temp."""
    return sizes["argument"] + sizes["output"] - sizes["alias"] + sizes["temp"] + sizes.get("generated_code", 0)


def jax_available(platform: str) -> tuple[int, str]:
    """Free memory of this process's first device (its allocator's limit less what is in use: the run's
    parameters and optimizer state are in use already), or the host's. ``jax.local_devices()``: on several
    hosts ``jax.devices()[0]`` is another process's device, whose memory this process cannot read."""
    if platforms.get(platform).accelerator:
        import jax

        stats = jax.local_devices()[0].memory_stats() or {}
        if "bytes_limit" in stats:
            return int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0)), platforms.get(platform).device_word
    return host_available_bytes(), "the host"


def jax_residuals(loss_of: Callable[..., Any], params: Any, *batch: Any) -> list[tuple[str, int]]:
    """Bytes the loss's forward pass keeps for its backward pass, grouped by the source line that made them
    (the parameters themselves, also residuals, are left out: they are counted as params)."""
    import jax
    from jax._src.ad_checkpoint import saved_residuals  # public as jax.ad_checkpoint.print_saved_residuals

    groups: dict[str, int] = defaultdict(int)
    # the batch is an argument too (traced, as in the step: a torchax loss cannot take host arrays as constants)
    for aval, desc in saved_residuals(lambda p, *b: loss_of(p, *b), params, *batch):
        if desc.startswith("from the argument"):
            continue
        size = int(aval.size) * aval.dtype.itemsize if hasattr(aval, "dtype") else 0
        groups[_short(desc)] += size
    del jax
    return sorted(groups.items(), key=lambda kv: -kv[1])


def _short(desc: str) -> str:
    """``'output of jitted function ... from /x/y/gpt_jax.py:40:12 (CausalSelfAttention.__call__)'`` ->
    ``'gpt_jax.py:40 CausalSelfAttention.__call__'``."""
    where = desc.split(" from ")[-1]
    path, _, rest = where.partition(" ")
    parts = os.path.basename(path).split(":")
    return f"{':'.join(parts[:2])} {rest.strip('()')}".strip() or desc[:80]


def torch_saved_activations(module: Any, forward: Callable[[], Any]) -> list[tuple[str, int]]:
    """Bytes autograd saves for the backward pass while ``forward()`` runs (a forward pass, or a whole training
    step), by the module that saved them (each storage counted once; parameters' storages left out). What
    ``forward()`` returns is dropped after."""
    import torch

    param_storages = {p.untyped_storage().data_ptr() for p in module.parameters()}
    seen: set[int] = set()
    groups: dict[str, int] = defaultdict(int)
    current = ["(top)"]

    def pre(name: str) -> Callable[..., None]:
        def hook(*_: Any) -> None:
            current.append(name)
        return hook

    def post(*_: Any) -> None:
        if len(current) > 1:
            current.pop()

    handles = []
    for name, sub in module.named_modules():
        if name:  # the innermost module running when the tensor was saved
            handles.append(sub.register_forward_pre_hook(pre(name)))
            handles.append(sub.register_forward_hook(post))

    def pack(t: torch.Tensor) -> torch.Tensor:
        s = t.untyped_storage()
        ptr = s.data_ptr()
        if ptr not in seen and ptr not in param_storages:
            seen.add(ptr)
            groups[current[-1]] += s.nbytes()
        return t

    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = forward()
        del out
    finally:
        for h in handles:
            h.remove()
    return sorted(groups.items(), key=lambda kv: -kv[1])


#: torch's memory profiler categories (torch.profiler._memory_profiler.Category, by name) -> our parts
TORCH_CATEGORIES = {"PARAMETER": "params", "OPTIMIZER_STATE": "optimizer_state", "GRADIENT": "gradients",
                    "ACTIVATION": "activations", "AUTOGRAD_DETAIL": "activations", "TEMPORARY": "temporaries",
                    "INPUT": "inputs", None: "temporaries"}


def torch_step_at_peak(step: Callable[[], Any], device: str) -> dict[str, int]:
    """The tensors alive at the peak of one ``step()``, by part, from the profiler's memory events
    (``profile_memory=True``): torch's memory profiler tells parameters, optimizer state, gradients, what
    autograd keeps and temporaries apart by following every op's inputs and outputs. Tensors it cannot place
    count as temporaries."""
    import json
    import tempfile
    import warnings

    from torch.profiler import ProfilerActivity, profile
    from torch.profiler._memory_profiler import _CATEGORY_TO_INDEX

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.startswith("cuda") else [])
    with profile(activities=activities, profile_memory=True, record_shapes=True, with_stack=True) as prof:
        step()
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # the timeline export is marked deprecated for CUDA
        path = f"{tmp}/timeline.json"
        prof.export_memory_timeline(path, device=device)
        with open(path) as f:
            _, sizes = json.load(f)
    if not sizes:
        return {}
    at_peak = max(sizes, key=sum)  # [unused, one total per category in _CATEGORY_TO_INDEX order]
    parts: dict[str, int] = defaultdict(int)
    for cat, i in _CATEGORY_TO_INDEX.items():
        parts[TORCH_CATEGORIES[cat.name if cat is not None else None]] += int(at_peak[i + 1])
    return dict(parts)


def runtime_bytes(trainer: Any) -> int:
    """The process's RSS less the trainer's parameters and optimizer state (called right after building)."""
    try:
        if isinstance(trainer, JaxStepTrainer):
            import jax

            state = nbytes(jax.tree.leaves((trainer.params, trainer.opt_state)))
        else:
            state = nbytes(trainer.model.parameters())
            state += nbytes(t for st in trainer.optimizer.state.values() for t in st.values()
                            if hasattr(t, "untyped_storage"))
    except Exception:  # an unknown trainer: the whole RSS
        state = 0
    return max(rss_bytes() - state, 0)


def batch_bytes(batch: Any) -> int:
    leaves = batch if isinstance(batch, (tuple, list)) else [batch]
    flat: list[Any] = []
    for x in leaves:
        flat.extend(x if isinstance(x, (tuple, list)) else [x])
    return nbytes(flat)


def jax_run_sizes(trainer: Any, batch: tuple[Any, Any]) -> dict[str, int]:
    """After the timed steps: the memory_analysis() of the step the run compiled, for its own state and one
    batch (JAX's in-memory caches give the run's executable back; nothing is compiled for a batch of the
    shapes the run saw)."""
    return jax_compiled_sizes(trainer.train_step, trainer.params, trainer.opt_state, *batch)


def jax_sizes(trainer: Any, batch: tuple[Any, Any]) -> dict[str, int]:
    """The preflight's compile: the training step compiled for the trainer's own state and one batch, as its
    first step would compile it, with the persistent compilation cache as the run has it. It is the run's own
    compile: JAX's in-memory caches hand this executable to the first step, which then compiles nothing, and
    the worker counts this compile's time as the run's (:meth:`Preflight.fold`). A compile thrown away here
    and made again by the first step would count it twice, and the first step's, made after this one warmed
    the compiler (GPU autotuning results are cached in-process), would understate the cold compile."""
    return jax_run_sizes(trainer, batch)


def resident_bytes(trainer: Any) -> int:
    """Bytes of the parameters and optimizer state the trainer holds already (in use on the device, or in the
    host's RSS): an estimate of the step's needs includes them, what is available excludes them."""
    try:
        if isinstance(trainer, JaxStepTrainer):
            import jax

            return nbytes(jax.tree.leaves((trainer.params, trainer.opt_state)))
        return nbytes(trainer.model.parameters())  # torch: AdamW makes its state at the first step
    except Exception:
        return 0


def torch_profiled_step(trainer: Any, batch: tuple[Any, Any], device: str) -> dict[str, int]:
    """:func:`torch_step_at_peak` over one training step of ``trainer``, whose model and optimizer are put
    back as they were after it (the record's weights stay those of the measured steps)."""
    import copy

    import torch

    model_state = copy.deepcopy(trainer.model.state_dict())
    opt_state = copy.deepcopy(trainer.optimizer.state_dict())
    try:
        return torch_step_at_peak(lambda: (trainer.step(*batch), trainer.sync()), device)
    finally:
        with torch.no_grad():
            trainer.model.load_state_dict(model_state)
        trainer.optimizer.load_state_dict(opt_state)
        trainer.optimizer.zero_grad(set_to_none=True)
