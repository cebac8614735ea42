"""``with twinbench.watch(): ...``: the doctor's instruments in the current process (notebooks, twinbench's own
runs of a user's model), the same findings as ``twinbench doctor SCRIPT`` without a child process."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from twinbench.doctor.findings import Finding
    from twinbench.doctor.observations import Observations


class Diagnosed:
    """What a doctor's diagnosis answers, for a script's run (``DoctorResult``) and a watched block alike:
    ``findings`` (worst first) and the ``observations`` they were made from."""

    findings: list[Finding]
    observations: Observations

    @property
    def serious(self) -> bool:
        from twinbench.doctor.findings import serious

        return serious(self.findings)

    @property
    def self_errors(self) -> list[str]:
        """The doctor's own failures (instrument, finalizer, donation check): the findings may be incomplete
        (see :func:`twinbench.doctor.report.self_errors`)."""
        from twinbench.doctor.report import self_errors

        return self_errors(self.observations)


class watch(Diagnosed):
    """Watch a training loop in this process and report the doctor's findings when the block ends.

    ``steps=N`` ends the block cleanly after N steps. After the block, ``.findings`` (worst first) and
    ``.observations`` hold the results; ``report=False`` skips printing. Jitted functions bound as globals
    of the calling module before the block (a notebook's earlier cell) are watched too.
    """

    def __init__(self, steps: int | None = None, report: bool = True) -> None:
        from twinbench.doctor.observations import Observations

        self.steps, self.report = steps, report
        self.findings: list[Finding] = []
        self.observations = Observations()

    def __enter__(self) -> watch:
        from twinbench.doctor.session import Session

        self.session = Session(max_steps=self.steps, capture_stderr=False)
        jax_inst = self.session.jax()
        if jax_inst is not None:
            jax_inst.adopt(sys._getframe(1).f_globals)
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> bool:
        from twinbench.doctor.bootstrap import describe_error
        from twinbench.doctor.findings import diagnose
        from twinbench.doctor.observations import typed
        from twinbench.doctor.recorder import StopScript

        stopped = isinstance(exc, StopScript)
        if exc is not None and not stopped:
            self.session.rec.error = describe_error(exc)
        self.observations = typed(self.session.stop())
        self.findings = diagnose(self.observations)
        if self.report:
            from rich.console import Console

            from twinbench.doctor.report import render

            render(Console(stderr=True), self.findings, self.observations, "(twinbench.watch)", watching=True)
        return stopped
