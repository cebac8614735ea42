"""The input check: the step called back to back on a batch already built, between the loop's own steps.

What a loop does between its step calls (building the next batch, a tokenizer, logging) costs it either as the
device idle, waiting for the next call, or, where the host and the "device" share cores (JAX on a CPU), as a slower
step: the loop's Python takes cores from XLA's threads while the step runs. Neither shows as idle time alone. So
the doctor times the step as it would run with the input already there: after the step calls
``INPUT_CHECK_FIRST`` and then every ``INPUT_CHECK_EVERY`` calls, it calls the compiled step itself ``INPUT_REPLAYS`` times back to back with
the same arguments (the batch just used, the state it was given: or, when the step donates its state, a copy of
the state it returned, carried from one call to the next), nothing of the loop in between, each timed to its
results being ready, and discards what they return. The recorder keeps the time of each call (``Recorder.input_blocks``); the iteration that holds a
block is left out of the loop's own timing (and the check's own seconds are taken off the loop's end-to-end rate:
``Recorder.own_work``), and ``findings.input`` compares the blocks with the loop's iterations
around them. ``twinbench doctor`` only (not ``watch()``), and not under ``--trace``.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from twinbench.doctor.instruments_jax.common import Hooks, _nbytes
from twinbench.doctor.recorder import InputBlock

if TYPE_CHECKING:
    from twinbench.doctor.instruments_jax.steps import _Jitted

INPUT_CHECK_FIRST = (2, 5, 8, 11)  # the step calls (0-based) after which a block runs: early and close together,
INPUT_CHECK_EVERY = 6  # so that a short run (--steps 8) has two; after the last of them, every this many calls
INPUT_REPLAYS = 4  # timed calls of the step per block
MAX_COPY_BYTES = 1 << 30  # a donated state larger than this is not copied for the check (device memory)


class InputCheck(Hooks):
    """Runs the input check's blocks from the step's wrapper (``_Jitted``) after a call of the step."""

    def input_check(self, wrapper: _Jitted, index: int, args: tuple, kwargs: dict, out: Any) -> None:
        rec = self.rec
        last = INPUT_CHECK_FIRST[-1]
        due = index in INPUT_CHECK_FIRST or (index > last and (index - last) % INPUT_CHECK_EVERY == 0)
        if (not rec.check_input or not due
                or wrapper.kind.endswith("-lib") or wrapper.rec_key != rec.step_key()
                or rec.info.input_check_error or rec.stopped_early):
            return
        if rec.max_steps and index >= rec.max_steps - 2:  # the loop's last iterations stay the loop's
            return
        rec.internal += 1
        try:
            per_step = self._replay(wrapper, args, kwargs, out)
        except Exception as e:  # the check is the doctor's: the script goes on as written
            rec.info.input_check_error = f"{type(e).__name__}: {e}"[:300]
            return
        finally:
            rec.internal -= 1
        if per_step:
            rec.input_blocks.append(InputBlock(index, [round(1e3 * t, 4) for t, _ in per_step],
                                               [round(1e3 * c, 4) for _, c in per_step]))

    def _replay(self, wrapper: _Jitted, args: tuple, kwargs: dict, out: Any) -> list[tuple[float, float]] | None:
        """The seconds of each of ``INPUT_REPLAYS`` calls of the step, back to back, and the process's CPU seconds
        in each (on a CPU backend, the step's cost whatever the load), each from its call to its results being
        ready (one at a time: a load spike weighs on one call, not on the block; the loop's own
        dispatch ahead is not given to them, so they err towards the slower), after the user's call is done;
        None when it cannot be."""
        jax = self.jax
        tree = jax.tree_util
        leaves, treedef = tree.tree_flatten((args, kwargs))
        out_leaves = tree.tree_leaves(out)
        _wait(jax, out_leaves)  # the user's step is done: the blocks do not overlap it
        t_own = time.perf_counter()  # from here on the doctor's own time, not the loop's (Recorder.own_work)
        try:
            return self._timed_calls(wrapper, leaves, treedef, out_leaves)
        finally:
            self.rec.own_work(time.perf_counter() - t_own)

    def _timed_calls(self, wrapper: _Jitted, leaves: list[Any], treedef: Any,
                     out_leaves: list[Any]) -> list[tuple[float, float]] | None:
        """The block's calls of the step on ``leaves`` (the user's call's arguments, flattened), timed."""
        jax = self.jax
        tree = jax.tree_util
        donated = any(k.startswith("donate") and v not in (None, (), [], {}) for k, v in wrapper.options.items())
        if donated:  # the inputs the step replaced are gone: start from a copy of the state it returned
            if not wrapper.carry_map or sum(_nbytes(out_leaves[o]) for o in wrapper.carry_map.values()) > \
                    MAX_COPY_BYTES:
                rec = self.rec
                rec.info.input_check_error = "the step donates a state the check cannot copy"
                return None
            leaves = list(leaves)
            for i, o in wrapper.carry_map.items():
                leaves[i] = out_leaves[o].copy()
        if any(isinstance(x, jax.Array) and x.is_deleted() for x in leaves):
            self.rec.info.input_check_error = "the step's inputs were deleted by its call (donated)"
            return None

        def call(leaves: list[Any]) -> list[Any]:
            a, k = tree.tree_unflatten(treedef, leaves)
            res = tree.tree_leaves(wrapper.jitted(*a, **k))
            if donated:  # carry the state to the next call, as the loop does
                for i, o in wrapper.carry_map.items():
                    leaves[i] = res[o]
            return res

        if donated:  # the copies are new arrays: one untimed call (placement, a compile if any) first
            _wait(jax, call(leaves))
        times = []
        for _ in range(INPUT_REPLAYS):
            t0, c0 = time.perf_counter(), time.process_time()
            _wait(jax, call(leaves))
            times.append((time.perf_counter() - t0, time.process_time() - c0))
        return times


def _wait(jax: Any, leaves: list[Any]) -> None:
    for x in leaves:
        if isinstance(x, jax.Array) and not x.is_deleted():
            x.block_until_ready()
