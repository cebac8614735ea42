"""Static facts about the step, read at the end of the run: donation (``Lowered.args_info``, the executable's
aliasing), its program (a Python loop unrolled into it, its attention) and the copy bandwidth when it takes
host arrays."""

from __future__ import annotations

import contextlib
import os
import re
import sys
import time
from typing import TYPE_CHECKING, Any

from twinbench.doctor.instruments_jax.common import Hooks, _nbytes
from twinbench.doctor.instruments_jax.transfers import _measure_h2d
from twinbench.doctor.observed import Carried, Memory, StepProgram

if TYPE_CHECKING:
    from twinbench.doctor.instruments_jax.steps import _Jitted


LOWER_CACHED_S = 0.05  # a lowering this fast came from JAX's cache (and so will the compile)
READ_COMPILE_MAX_S = 5.0  # a step that compiled faster may be compiled again to read its HLO


def jax_threads(flags: str, cores: int) -> int:
    """The threads XLA's CPU client computes with under ``XLA_FLAGS`` ``flags``: one per core it may run on
    (``cores``), unless told otherwise (``intra_op_parallelism_threads=N``, or Eigen's multi-threading off)."""
    m = re.search(r"intra_op_parallelism_threads=(\d+)", flags)
    if m:
        return int(m.group(1))
    return 1 if re.search(r"--xla_cpu_multi_thread_eigen=(false|0)\b", flags) else cores


class StepFacts(Hooks):
    """``finalize``: what the step function is, once the script has run."""

    # -- end of run --------------------------------------------------------------------------------------
    def finalize(self) -> None:
        """Add static facts about the step function: donation (Lowered.args_info), memory, sharding."""
        rec = self.rec
        info = rec.info
        info.eager_sources = dict(self.eager_sources.most_common(8))
        info.jax_host_read_sites = dict(self.read_sites.most_common(8))
        info.threads["jax"] = jax_threads(os.environ.get("XLA_FLAGS", ""), len(os.sched_getaffinity(0)))
        with self.guard("eager step"):
            info.eager_step = self.eager_step.describe()
        with self.guard("backend"):
            info.backend = self.jax.default_backend()
        key = rec.step_key()
        wrapper = self.wrappers.get(key or "")
        if wrapper is None:
            return
        carried = wrapper.carried or Carried()
        info.step_def = wrapper.key
        info.carried = carried
        info.carried_args = wrapper.carried_args  # the arguments holding state carried step to step
        info.jit_options = {k: v for k, v in wrapper.options.items()  # as the script gave them, where
                            if _plain(v)}  # printable as code and kept in a JSON record (no shardings)
        info.jit_kind = "nnx" if type(wrapper.fun).__module__.startswith("flax") else wrapper.kind
        info.fresh_args = wrapper.fresh
        info.devices = self.jax.device_count()
        if wrapper.specs is not None and not wrapper.kind.startswith("pmap"):
            with self.guard("step program"):
                _read_program(self, wrapper)
        elif wrapper.kind.startswith("pmap"):  # said, not silently left out
            info.skipped["the step's program (unrolled layers, attention kernel)"] = (
                "a pmapped step is not traced again from its shapes; jit it (jax-pmap-legacy) to have it checked")
        if rec.counters["h2d_numpy_args"] or rec.counters["h2d_guard_arrays"]:
            rec.internal += 1
            try:
                info.h2d = _measure_h2d(self.jax)
            finally:
                rec.internal -= 1
        if wrapper.specs is not None and carried.bytes:
            rec.internal += 1
            try:
                with _nnx_context(wrapper.fun):
                    lowered = wrapper.jitted.lower(*wrapper.specs[0], **wrapper.specs[1])
                infos = self.jax.tree_util.tree_leaves(lowered.args_info)
                donated = sum(_nbytes(a) for a in infos if getattr(a, "donated", False))
                info.donated_bytes = donated
                if donated >= 0.5 * carried.bytes:
                    return  # donated: no finding, so no need to compile (from cache, normally) for memory
                # Lowered.args_info is not the whole truth (a pmapped step marks only the first leaf of a
                # donated argument): what the executable aliases, per device, decides.
                mem = lowered.compile().memory_analysis()
                if mem is not None:
                    info.memory = Memory(
                        argument_size_in_bytes=int(mem.argument_size_in_bytes),
                        output_size_in_bytes=int(mem.output_size_in_bytes),
                        alias_size_in_bytes=int(mem.alias_size_in_bytes),
                        temp_size_in_bytes=int(mem.temp_size_in_bytes))
                    info.memory_capacity_bytes = memory_capacity(self.jax)
            except Exception as e:  # the report says what it could not learn
                if type(wrapper.jitted).__module__.startswith("flax") or "update context" in str(e):
                    # a Flax NNX transform (nnx.jit & co.) cannot be re-lowered from shapes outside its
                    # graph context: the donation is not checked, which is not a failure of the doctor
                    info.donation_skipped = f"{type(e).__name__}: {e}"[:300]
                    return
                info.donation_error = f"{type(e).__name__}: {e}"[:300]
            finally:
                rec.internal -= 1


def _read_program(self: StepFacts, wrapper: _Jitted) -> None:
    """The step's program, traced again from its argument shapes (JAX's caches answer: no new compile): a
    Python loop unrolled into it (its jaxpr) and its attention (its compiled HLO)."""
    from twinbench.doctor import program

    rec = self.rec
    trace = getattr(wrapper.jitted, "trace", None)
    if trace is None:
        return
    rec.internal += 1
    t0 = time.perf_counter()
    try:
        with _nnx_context(wrapper.fun):
            traced = trace(*wrapper.specs[0], **wrapper.specs[1])
            seq = program.tokens(traced.jaxpr)
            # the step's own backend compile(s), from JAX's monitoring events
            names = (f"jit({wrapper.name})", f"pjit({wrapper.name})", wrapper.name)
            info = StepProgram(eqns=len(seq), backend=self.jax.default_backend(), repeat=program.find_repeat(seq),
                               compile_s=round(sum(n.s for n in rec.notes["compile"] if n.fn in names), 4))
            t1 = time.perf_counter()
            lowered = traced.lower()
            if time.perf_counter() - t1 < LOWER_CACHED_S or info.compile_s < READ_COMPILE_MAX_S:
                hlo = lowered.compile().as_text()
                info.attention = program.attention(hlo)
                info.float64 = program.float64(hlo)
            else:  # the lowering missed JAX's cache, so would the compile: not worth a second compile
                info.attention_skipped = "the step's program is not in JAX's cache"
                info.float64 = program.float64_jaxpr(traced.jaxpr)  # the dtypes XLA is given
            if info.float64 is not None:  # where its float64 comes from: 64-bit mode, the arguments
                program.float64_sources(info.float64, self.jax, wrapper.fun, wrapper.specs, wrapper.key)
        info.read_s = round(time.perf_counter() - t0, 4)  # the doctor's own time reading it back
        rec.info.step_program = info
    finally:
        rec.internal -= 1



def memory_capacity(jax: Any) -> int | None:
    """The memory a step's buffers compete for: the first device's limit (``memory_stats``' ``bytes_limit``, an
    accelerator's), else, on the CPU, the host memory available now (``MemAvailable``); None where unknown."""
    try:
        stats = jax.devices()[0].memory_stats() or {}
    except Exception:  # a backend without memory stats
        stats = {}
    if stats.get("bytes_limit"):
        return int(stats["bytes_limit"])
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _nnx_context(fun: Any) -> Any:
    """The context a Flax NNX transform's inner function is traced in: ``nnx.jit`` (graph mode) merges its
    arguments back into objects inside ``nnx.update_context(tag)``, so re-lowering it from shapes (the
    donation check) needs that same context; for anything else, none."""
    tag = getattr(fun, "ctxtag", None)
    if tag is None or "flax" not in sys.modules or not type(fun).__module__.startswith("flax"):
        return contextlib.nullcontext()
    from flax import nnx

    return nnx.update_context(tag)


def _plain(v: object) -> bool:
    """A jit option's value made of ints, strings, bools and None only (nested in tuples or lists): one the
    doctor can print back as Python and a record can hold as JSON."""
    if isinstance(v, (tuple, list)):
        return all(_plain(x) for x in v)
    return isinstance(v, (int, str, type(None)))
