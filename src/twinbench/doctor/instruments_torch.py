"""PyTorch instruments: record what a training script does, through PyTorch's own hooks where it has them.

Official hooks: the global optimizer step hooks (``register_optimizer_step_pre_hook``/``post_hook``: one
call = one step), ``torch._logging`` recompile and graph-break logs (captured through ``logging``, reasons
included), ``torch._dynamo`` counters and compile-time metrics, ``torch.cuda.set_sync_debug_mode("warn")``
on CUDA (every synchronising call becomes a warning, counted here). Where no hook sees it (the CPU):
thin wrappers around ``Tensor`` conversions (``.item()``, ``float()``, ``.tolist()``, printing) count host
reads, and the DataLoader iterator's ``__next__`` is timed to see how long the loop waits for data.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
import threading
import time
import warnings
from collections import Counter
from collections.abc import Callable
from typing import Any

from twinbench.doctor.locations import short_path, user_location
from twinbench.doctor.patching import Patches
from twinbench.doctor.ready import ReadyWatcher
from twinbench.doctor.recorder import Recorder
from twinbench.doctor.thread_check import ThreadSwitch
from twinbench.measure.interference import runqueue_wait_s

STEP_KEY = "torch:Optimizer.step"  # the first optimizer to step; another: STEP_KEY#2, ...
BACKWARD_KEY = "torch:loss.backward"  # the step when no torch.optim optimizer runs (manual SGD)
HOST_READS = ("item", "tolist", "numpy", "__float__", "__int__", "__bool__", "__index__", "__repr__",
              "__format__")
# torch._logging artifact loggers (module + "__" + artifact); getLogger creates them if torch has not yet.
RECOMPILE_LOGGER = "torch._dynamo.guards.__recompiles"
GRAPH_BREAK_LOGGER = "torch._dynamo.symbolic_convert.__graph_breaks"
WATCHED = "_twinbench_doctor_step"  # marks a torch.compile'd function whose calls the doctor counts



def param_bytes(optimizer: Any) -> dict[str, int]:
    """The bytes of the parameters an optimizer updates, by dtype (``float64``: the model computes in float64)."""
    out: dict[str, int] = {}
    for group in getattr(optimizer, "param_groups", []):
        for p in group.get("params", []):
            dt = str(p.dtype).removeprefix("torch.")
            out[dt] = out.get(dt, 0) + p.numel() * p.element_size()
    return out


def float64_line() -> str:
    """The line of the script that makes its parameters float64 (``model.double()``, ``torch.float64``, else a
    ``torch.from_numpy``: numpy's default is float64), where found."""
    from twinbench.doctor import program

    main = getattr(sys.modules.get("__main__"), "__file__", None)
    return program.first_line([main] if main else [], program.TORCH_F64)

class _NoteFilter(logging.Filter):
    def __init__(self, rec: Recorder, kind: str) -> None:
        super().__init__()
        self.rec, self.kind = rec, kind

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.rec.internal:
            self.rec.note(self.kind, message=record.getMessage()[:1500])
        return False  # reported by the doctor, not printed


class TorchInstruments(Patches):
    """Installs every PyTorch hook on construction; ``uninstall()`` puts PyTorch back as it was."""

    def __init__(self, rec: Recorder) -> None:
        import torch
        import torch._logging
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

        self.rec, self.torch = rec, torch
        self.optimizer_keys: dict[int, str] = {}  # each stepping optimizer's first parameter's id -> its key
        self.watcher = ReadyWatcher(rec)  # CUDA: when each step's kernels are done (the loop is not stalled)
        self.undo: list[Callable[[], None]] = []
        self.read_sites: Counter[str] = Counter()
        self.loader_sites: Counter[str] = Counter()  # reads made inside the DataLoader's fetch (a dataset's code)
        self.loading = threading.local()  # depth > 0: inside the DataLoader iterator's __next__
        self.torch_dir = os.path.dirname(torch.__file__)
        rec.frameworks.add("torch")
        rec.finalizers.append(self.finalize)
        self.threads = ThreadSwitch(rec, torch)  # cpu-oversubscribed's A/B (a run of the doctor's own)

        pre = register_optimizer_step_pre_hook(self._pre_step)
        post = register_optimizer_step_post_hook(self._post_step)
        self.undo += [pre.remove, post.remove]
        # The time from an optimizer step's end to the next forward pass: where the loop gets its next batch
        # (a DataLoader or any Python iterator), zeroes the gradients and logs.
        from torch.nn.modules.module import register_module_forward_pre_hook

        self.step_end: float | None = None
        self.step_end_runq: float | None = None
        self.undo.append(register_module_forward_pre_hook(self._before_forward).remove)

        torch._logging.set_logs(recompiles=True, graph_breaks=True)
        self.undo.append(torch._logging.set_logs)  # back to the defaults
        for name, kind in ((RECOMPILE_LOGGER, "recompile"), (GRAPH_BREAK_LOGGER, "graph_break")):
            logger, filt = logging.getLogger(name), _NoteFilter(rec, kind)
            logger.addFilter(filt)
            self.undo.append(functools.partial(logger.removeFilter, filt))

        self._patch_host_reads()
        self._patch_dataloader()
        self._patch_backward()
        self._patch_compile()
        self._patch_optimizer_init()
        self.sync_mode_set = False

    def uninstall(self) -> None:
        self.undo_all()
        self.watcher.close()

    # -- steps ------------------------------------------------------------------------------------------
    def _key(self, optimizer: Any) -> str:
        """Each optimizer's steps are a candidate of their own: the first to step is ``STEP_KEY``, the next
        ``STEP_KEY#2`` and so on (a GAN's discriminator and generator; ``Recorder.step_key`` picks the one that
        marks the loop's iteration), named with its class in the observations. An optimizer is known by the
        parameters it updates (its first one), so one made again for the same model (each epoch, say) keeps the
        key of the one before."""
        try:
            who = id(optimizer.param_groups[0]["params"][0])
        except (AttributeError, IndexError, KeyError, TypeError):
            who = id(optimizer)
        key = self.optimizer_keys.get(who)
        if key is None:
            n = len(self.optimizer_keys)
            key = self.optimizer_keys[who] = STEP_KEY if n == 0 else f"{STEP_KEY}#{n + 1}"
            self.rec.info.torch_optimizers[key.split(":", 1)[1]] = type(optimizer).__name__
            found = self.rec.info.torch_param_bytes[key.split(":", 1)[1]] = param_bytes(optimizer)
            if found.get("float64") and not self.rec.info.torch_float64_line:
                self.rec.info.torch_float64_line = float64_line()
        return key

    def _pre_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self.torch.compiler.is_compiling():  # a compiled optimizer step: stay out of dynamo's graph
            return
        if not self.sync_mode_set:
            self._cuda_sync_debug()
        self.rec.step_call(key := self._key(optimizer), "torch-optimizer")
        self.threads.at_call(key)

    def _post_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if not self.torch.compiler.is_compiling():
            self.step_end, self.step_end_runq = time.perf_counter(), runqueue_wait_s()
            self._done(self._key(optimizer))

    def _before_forward(self, module: Any, args: Any) -> None:
        """The first module called after an optimizer step: the next iteration's forward starts."""
        if self.torch.compiler.is_compiling() or self.step_end is None:  # dynamo traces this: nothing to trace
            return
        self.rec.seconds["to_forward_s"] += time.perf_counter() - self.step_end
        # ... less the time the loop's thread waited for a CPU other processes held (a busy machine, not input)
        runq = runqueue_wait_s()
        if runq is not None and self.step_end_runq is not None:
            self.rec.seconds["to_forward_runq_s"] += runq - self.step_end_runq
        self.step_end = None

    def _done(self, key: str) -> None:
        """The step returned. On the CPU a PyTorch step is synchronous: its results are ready now. On CUDA the
        doctor records an event after the step's kernels and a watcher thread waits on it (the loop's
        asynchronous queue is left as it is, so host reads still wait as long as they would without it)."""
        cuda, rec = self.torch.cuda, self.rec
        if cuda.is_available() and cuda.is_initialized():
            event = cuda.Event()
            event.record()
            self.watcher.submit(key, rec.call_index(key), event.synchronize)
            rec.step_done(key)
        else:
            rec.step_done(key, synced=True)

    def _patch_backward(self) -> None:
        """Count each autograd run started from user code (``loss.backward()``): one per training step."""
        import torch.autograd

        orig, rec, torch_dir, threads = torch.autograd.backward, self.rec, self.torch_dir, self.threads
        is_compiling, done = self.torch.compiler.is_compiling, self._done

        @functools.wraps(orig)
        def backward(*args: Any, **kwargs: Any) -> Any:
            if is_compiling() or rec.internal:
                return orig(*args, **kwargs)
            frame = sys._getframe(1)
            if frame.f_code.co_filename.startswith(torch_dir):  # Tensor.backward: the user's caller above it
                frame = frame.f_back or frame
            if frame.f_code.co_filename.startswith(torch_dir):
                return orig(*args, **kwargs)
            rec.step_call(BACKWARD_KEY, "torch-backward")
            threads.at_call(BACKWARD_KEY)
            out = orig(*args, **kwargs)
            done(BACKWARD_KEY)
            return out

        self._patch(torch.autograd, "backward", backward)

    def _patch_compile(self) -> None:
        """A function the script compiles with ``torch.compile`` (as a call or a decorator, with or without
        options) is a step candidate, its calls counted as a jitted JAX function's are: a whole training step
        compiled, its optimizer's update included, runs no optimizer hook and no ``loss.backward()`` the doctor
        can see. A compiled module is left as it is (its forward is part of a step found otherwise)."""
        torch, rec, done, threads = self.torch, self.rec, self._done, self.threads
        orig = torch.compile

        def watch(compiled: Any, fn: Any) -> Any:
            if (isinstance(fn, torch.nn.Module) or not callable(compiled) or not callable(fn)
                    or getattr(compiled, WATCHED, False)):  # the decorator form compiles through this patch too
                return compiled
            key = f"torch-compile:{getattr(fn, '__name__', None) or type(fn).__name__}"

            @functools.wraps(fn)
            def call(*args: Any, **kwargs: Any) -> Any:
                if torch.compiler.is_compiling() or rec.internal:  # called from compiled code: part of a step
                    return compiled(*args, **kwargs)
                rec.step_call(key, "torch-compiled")
                threads.at_call(key)
                out = compiled(*args, **kwargs)
                done(key)
                return out

            setattr(call, WATCHED, True)
            return call

        @functools.wraps(orig)
        def compile(model: Any = None, *args: Any, **kwargs: Any) -> Any:
            made = orig(model, *args, **kwargs)
            if model is None:  # @torch.compile(mode=...): the decorator it returns compiles the function
                return lambda fn: watch(made(fn), fn)
            return watch(made, model)

        self._patch(torch, "compile", compile)

    def _patch_optimizer_init(self) -> None:
        """Count the torch optimizers the script makes: once one exists, a ``loss.backward()`` is a micro-step
        of its step (gradient accumulation), not the step (``Recorder.step_key``)."""
        from torch.optim import Optimizer

        orig, rec = Optimizer.__init__, self.rec

        @functools.wraps(orig)
        def init(opt: Any, *args: Any, **kwargs: Any) -> None:
            orig(opt, *args, **kwargs)
            rec.torch_optimizers += 1

        self._patch(Optimizer, "__init__", init)

    def _cuda_sync_debug(self) -> None:
        """On CUDA, make every synchronising call a warning (counted by ``_on_warning``, not printed)."""
        self.sync_mode_set = True
        torch = self.torch
        if not (torch.cuda.is_available() and torch.cuda.is_initialized()):
            return
        self.rec.info.cuda = torch.cuda.get_device_name()
        torch.cuda.set_sync_debug_mode("warn")
        self.undo.append(lambda: torch.cuda.set_sync_debug_mode("default"))
        warnings.filterwarnings("always", message=".*synchroniz")
        original = warnings.showwarning
        rec, torch_dir = self.rec, self.torch_dir

        def showwarning(message: Any, category: Any, filename: str, lineno: int, *a: Any, **k: Any) -> None:
            if "synchroniz" in str(message):
                if not filename.startswith(torch_dir):
                    rec.count("cuda_syncs")
                return
            original(message, category, filename, lineno, *a, **k)

        warnings.showwarning = showwarning
        self.undo.append(lambda: setattr(warnings, "showwarning", original))

    # -- host reads ------------------------------------------------------------------------------------
    def _patch_host_reads(self) -> None:
        tensor = self.torch.Tensor
        rec, sites, torch_dir, local = self.rec, self.read_sites, self.torch_dir, threading.local()
        inst = self
        is_compiling = self.torch.compiler.is_compiling

        def wrap(how: str, orig: Callable) -> Callable:
            @functools.wraps(orig)
            def read(self: Any, *args: Any, **kwargs: Any) -> Any:
                if is_compiling():  # dynamo traces this wrapper: a constant branch, nothing else to trace
                    return orig(self, *args, **kwargs)
                depth = getattr(local, "depth", 0)
                timed = False
                loader = False
                if depth == 0 and not rec.internal:
                    frame = sys._getframe(1)
                    filename = frame.f_code.co_filename
                    loader = getattr(inst.loading, "depth", 0) > 0
                    if loader and not filename.startswith(torch_dir):  # a dataset's __getitem__, run by the
                        # DataLoader's fetch: the input's work (a library's, often), not the loop's reads
                        rec.count("torch_loader_reads")
                        inst.loader_sites[f"{short_path(filename)}:{frame.f_lineno} in {frame.f_code.co_name}() "
                                          f"({how.strip('_')})"] += 1
                        timed = True
                    elif not filename.startswith(torch_dir):
                        rec.count("torch_host_reads")
                        # the user's line first, then the library that read (numpy indexing with a tensor)
                        loc = user_location(frame)
                        where = loc[0] if loc is not None else f"{filename}:{frame.f_lineno}"
                        sites[f"{where} ({how.strip('_')})"] += 1
                        timed = True
                local.depth = depth + 1
                t0 = time.perf_counter()
                try:
                    return orig(self, *args, **kwargs)
                finally:
                    local.depth = depth
                    if timed:  # the wait for the device (and the conversion): the read's cost
                        rec.seconds["torch_loader_read_s" if loader else "torch_host_read_s"] += \
                            time.perf_counter() - t0

            return read

        for how in HOST_READS:
            orig = getattr(tensor, how, None)
            if orig is not None:
                self._patch(tensor, how, wrap(how, orig))

    # -- data loading ------------------------------------------------------------------------------------
    def _patch_dataloader(self) -> None:
        try:
            from torch.utils.data.dataloader import _BaseDataLoaderIter
        except ImportError:
            return
        orig = _BaseDataLoaderIter.__next__
        rec = self.rec

        loading = self.loading

        def __next__(it: Any) -> Any:
            t0, r0 = time.perf_counter(), runqueue_wait_s()
            loading.depth = getattr(loading, "depth", 0) + 1
            try:
                return orig(it)
            finally:
                loading.depth -= 1
                rec.seconds["data_wait_s"] += time.perf_counter() - t0
                r1 = runqueue_wait_s()  # the part of it the thread waited for a CPU others held: not input
                if r0 is not None and r1 is not None:
                    rec.seconds["data_wait_runq_s"] += r1 - r0

        self._patch(_BaseDataLoaderIter, "__next__", __next__)

    # -- end of run --------------------------------------------------------------------------------------
    def finalize(self) -> None:
        rec = self.rec
        rec.info.torch_host_read_sites = dict(self.read_sites.most_common(8))
        rec.info.torch_loader_read_sites = dict(self.loader_sites.most_common(8))
        rec.info.threads["torch"] = self.torch.get_num_threads()
        if "torch._dynamo" in sys.modules:
            from twinbench.measure.compiles import TorchCompiles

            tc = TorchCompiles()
            rec.add_seconds("compile_s", tc.seconds())
            rec.info.torch_graphs = tc.count()
            from torch._dynamo.utils import counters

            rec.info.torch_graph_break_counts = {k.split("\n")[0][:200]: v for k, v in
                                                 {**counters["graph_break"], **counters["unimplemented"]}.items()}
