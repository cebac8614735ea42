"""The timed loop reads its loss handles back as it goes, outside the steps' clocks: a long run holds a few."""

from __future__ import annotations

import weakref

from twinbench.measure import clock


class Monitor:
    def seconds(self) -> float:
        return 0.0

    def count(self) -> int:
        return 0


class Handle:
    """A loss handle (a device scalar's stand-in): its value read back with tolist()."""

    def __init__(self, i: int) -> None:
        self.i = i

    def tolist(self) -> float:
        return float(self.i)


def test_a_long_run_holds_a_few_loss_handles_and_keeps_every_loss_in_order():
    alive: weakref.WeakSet[Handle] = weakref.WeakSet()
    most = 0

    def step(i: int) -> Handle:
        nonlocal most
        h = Handle(i)
        alive.add(h)
        most = max(most, len(alive))
        return h

    steps = 5 * clock.HANDLES_HELD + 7
    t = clock.time_steps(step, lambda: None, steps, 2, Monitor())  # type: ignore[arg-type]
    assert t.losses == [float(i) for i in range(steps)]
    assert most <= clock.HANDLES_HELD + 1, most  # one a step until the end was `steps`
    assert len(t.step_s) == steps - 2
