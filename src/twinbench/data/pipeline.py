"""The input pipeline: host batches made per step, by background workers, and prefetched onto the device.

- :class:`HostBatches`: batch ``i`` made on demand (a classification batch is tokenised and padded when it is
  asked for; an LM batch is a window already cut). ``slow_input_ms`` adds that much simulated host work
  (a sleep, standing for decoding, augmentation or a slow disk) to every batch: :meth:`HostBatches.host_work`.
- :func:`feed`: without ``prefetch``, each batch is made on the main thread when the step asks for it, the
  way a plain Python loop does (the same code for both frameworks). With ``prefetch``:
  - PyTorch: a ``torch.utils.data.DataLoader`` with background worker processes (pinned memory on CUDA),
    then a device prefetcher that copies the next batches with ``non_blocking`` on a side CUDA stream;
  - JAX: a Grain pipeline, ``grain.MapDataset.range(n).map(build).map(host_work)`` read in order by
    ``WORKERS`` threads up to ``HOST_DEPTH`` batches ahead (``.to_iter_dataset(grain.ReadOptions(...))``:
    the simulated host work runs inside the map, on the workers), then ``grain.experimental.device_put``: a
    background thread that puts the next ``DEVICE_DEPTH`` batches on the device ahead of the step. Threads,
    not Grain's worker processes (``mp_prefetch``): a sleep, numpy and I/O release the GIL; pure-Python
    tokenising does not, so the workers overlap it with the step's device work but not with each other.

The frameworks (and Grain) are imported lazily: a process only loads the one it runs.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

Batch = tuple[Any, Any]
WORKERS = 2  # background workers of the host pipeline
HOST_DEPTH = 4  # batches the host workers may run ahead (JAX; the DataLoader's prefetch_factor per worker)
DEVICE_DEPTH = 2  # batches already on the device ahead of the step


class HostBatches(Sequence):
    """Batch ``i`` of a run, made on demand by ``make(i)``; ``k`` > 1 stacks K batches per call (scan-steps)."""

    def __init__(self, make: Callable[[int], Batch], n_calls: int, k: int = 1, slow_input_ms: float = 0.0):
        self.make, self.n_calls, self.k, self.slow_s = make, n_calls, k, slow_input_ms / 1e3

    def __len__(self) -> int:
        return self.n_calls

    def __getitem__(self, i: int) -> Batch:  # type: ignore[override]
        """Batch ``i`` with its simulated host work: what a plain loop (or a DataLoader worker) does per step."""
        return self.host_work(self.build(i))

    def build(self, i: int) -> Batch:
        """Batch ``i`` itself: made by ``make`` (``k`` of them stacked)."""
        if not 0 <= i < self.n_calls:
            raise IndexError(i)
        if self.k == 1:
            return self.make(i)
        parts = [self.make(i * self.k + j) for j in range(self.k)]
        return _stack(parts)

    def window(self, start: int, n: int, calls: int) -> HostBatches:
        """``calls`` calls made the same way from calls ``start`` .. ``start + n - 1``, again and again in that
        order (the step-time window replays the steady steps' batches: shapes the run has seen)."""
        k = self.k
        return HostBatches(lambda i: self.make((start + (i // k) % n) * k + i % k), calls, k, self.slow_s * 1e3)

    def host_work(self, batch: Batch) -> Batch:
        """The simulated slow host work of a batch (``slow_input_ms``), then the batch unchanged."""
        if self.slow_s:
            time.sleep(self.slow_s)
        return batch


def _stack(parts: list[Any]) -> Any:
    if isinstance(parts[0], tuple):
        return tuple(_stack([p[n] for p in parts]) for n in range(len(parts[0])))
    return np.stack(parts)


def _tree_map(fn: Callable[[Any], Any], tree: Any) -> Any:
    return tuple(_tree_map(fn, t) for t in tree) if isinstance(tree, (tuple, list)) else fn(tree)


def _leaves(tree: Any) -> list[Any]:
    return [x for t in tree for x in _leaves(t)] if isinstance(tree, (tuple, list)) else [tree]


def feed(batches: HostBatches, framework: str, prefetch: bool) -> Iterator[Batch]:
    """The batches in order, as the step loop consumes them (see the module docstring)."""
    if not prefetch:
        return (batches[i] for i in range(len(batches)))
    return PREFETCH[framework](batches)


# ------------------------------------------------------------------------------------------------ torch
class _Indexed:
    """A map-style dataset over the batches (DataLoader with batch_size=None yields them as they are)."""

    def __init__(self, batches: HostBatches):
        self.batches = batches

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, i: int) -> Batch:
        return self.batches[i]


def _torch_loader(batches: HostBatches) -> Iterator[Batch]:
    import torch
    from torch.utils.data import DataLoader

    loader = DataLoader(_Indexed(batches), batch_size=None, shuffle=False, num_workers=WORKERS,
                        prefetch_factor=HOST_DEPTH, pin_memory=torch.cuda.is_available())
    return iter(loader)


def _torch_device_prefetch(it: Iterator[Batch]) -> Iterator[Batch]:
    """Copy the next batches to the device ahead of the step: pinned memory, ``non_blocking``, side stream."""
    import torch

    from twinbench.measure.device import torch_device

    device = torch_device()
    if device.type != "cuda":  # host memory is the device: nothing to copy ahead
        yield from (_tree_map(torch.as_tensor, b) for b in it)
        return
    stream = torch.cuda.Stream()
    queue: deque = deque()

    def put(b: Batch) -> tuple[Batch, Any]:
        with torch.cuda.stream(stream):
            out = _tree_map(lambda t: torch.as_tensor(t).to(device, non_blocking=True), b)
            event = torch.cuda.Event()
            event.record(stream)
        return out, event

    def ready(item: tuple[Batch, Any]) -> Batch:
        out, event = item
        current = torch.cuda.current_stream()
        current.wait_event(event)  # the step's kernels wait for the copy, on the device, not the host
        for t in _leaves(out):
            t.record_stream(current)  # the allocator must not reuse the buffer while the step reads it
        return out

    for b in it:
        queue.append(put(b))
        if len(queue) >= DEVICE_DEPTH:
            yield ready(queue.popleft())
    while queue:
        yield ready(queue.popleft())


# -------------------------------------------------------------------------------------------------- jax
def _jax_grain(batches: HostBatches) -> Iterator[Batch]:
    """Grain: ``WORKERS`` threads make the batches in order (the host work inside the map), up to ``HOST_DEPTH``
    ahead; ``grain.experimental.device_put`` keeps the next ``DEVICE_DEPTH`` on the device."""
    import grain

    n = len(batches)
    host = (grain.MapDataset.range(n).map(batches.build).map(batches.host_work)
            .to_iter_dataset(grain.ReadOptions(num_threads=WORKERS, prefetch_buffer_size=HOST_DEPTH)))
    # device None: jax.device_put's default device (the step places the batch itself); cpu_buffer_size=0: no
    # second host buffer (nor its thread) behind the workers' HOST_DEPTH; on the device, DEVICE_DEPTH batches
    # wait in the queue (and the device thread may hold one more, blocked until there is room)
    it = iter(grain.experimental.device_put(host, None, cpu_buffer_size=0, device_buffer_size=DEVICE_DEPTH))
    try:
        for i in range(n):
            batch = next(it)
            if i == n - 1:  # the loop's last batch: stop the workers and the device thread now
                it.close()
            yield batch
    finally:  # an early stop (an error in the loop, or the consumer closing the generator)
        it.close()


def _torch_prefetch(batches: HostBatches) -> Iterator[Batch]:
    return _torch_device_prefetch(_torch_loader(batches))


#: each framework's prefetching pipeline (the module docstring), by the run's framework
PREFETCH: dict[str, Callable[[HostBatches], Iterator[Batch]]] = {"torch": _torch_prefetch, "jax": _jax_grain}
