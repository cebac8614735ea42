"""A per-shape claim checked the way a user would check it: the matmul of that shape run in each side's framework
on this machine, each in a fresh process, and timed.

Two traces of the same scripts can name different "slowest" matmul shapes, and a trace's time of one op is not an
A/B of it: the profiler, the ops around it and the layout the program chose all weigh on it. So explain names
"the largest matmul gap by shape" only where an A/B of that shape agrees: the product ``batch x [m,k] x [k,n]``
with each side's own operand layout (``NN``, ``NT``...), in each side's framework, fp32, one thread each on the
same core (a product's own speed, and no thread pool spinning against whatever else the machine runs), timed
after a warm-up in windows of at least :data:`WINDOW_S` seconds; the claim
stands when the A/B's gap a step (a call's time times the side's calls a step) has the trace's sign and stands
beyond the two sides' spread. Only CPU traces are checked here: a GPU's or a TPU's shape needs that device, and
is not named from a CPU.

``python -m twinbench.explain.shape_ab FRAMEWORK BATCH M K N LAYOUT OUT`` is the child (runner.run_module
starts it): it writes ``{"ms": [...], "threads": N}`` to OUT.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import msgspec

from twinbench.folder_io import read_small, write_text

WARMUP = 3  # calls before any timing: the first compiles (JAX) or allocates
WINDOW_S = 0.05  # a sample is the mean call over a window at least this long: a clock's resolution is no noise
SAMPLES = 9
TIMEOUT_S = 120.0  # one framework's child: its import, a compile, the samples
#: the A/B's gap must pass the two sides' spread (p90 - p10 of the samples, per step) by this factor
BEYOND = 1.0
#: ``TWINBENCH_SHAPE_AB=0`` starts no process: the shape is then not named ("not timed"), as where it fails
SWITCH = "TWINBENCH_SHAPE_AB"


class Timed(msgspec.Struct, frozen=True):
    """One framework's timing of the shape: each window's mean call in ms, and the threads it ran on."""

    ms: list[float]
    threads: int

    @property
    def median(self) -> float:
        return statistics.median(self.ms)

    @property
    def spread(self) -> float:
        """p90 - p10 of the windows (their range under 10 samples)."""
        s = sorted(self.ms)
        lo, hi = s[len(s) // 10], s[-1 - len(s) // 10]
        return hi - lo


class Verdict(msgspec.Struct, frozen=True):
    """The A/B of one shape: each side's call (ms, median), its calls a step, and whether it confirms the trace."""

    a_ms: float
    b_ms: float
    a_calls: float
    b_calls: float
    noise_ms: float  # the sides' spread a step, combined
    confirms: bool
    threads: int

    @property
    def gap_ms(self) -> float:
        """B - A a step, by the A/B."""
        return self.b_ms * self.b_calls - self.a_ms * self.a_calls


def one_core() -> int:
    """Pin this process to the first core it may run on (before a framework sizes its pools from the
    affinity); the threads it then runs with."""
    with contextlib.suppress(AttributeError, OSError):  # not Linux: the framework's default, said as 1 all the same
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    return 1


def time_shape(framework: str, batch: int, m: int, k: int, n: int, layout: str) -> Timed:
    """The product timed in this process (the child's work)."""
    from twinbench import backends

    threads = one_core()
    backend = backends.get(framework)
    backend.set_threads(threads)
    run, sync = backend.matmul("cpu", "fp32", batch, m, k, n, layout or "NN")
    for _ in range(WARMUP):
        run()
    sync()
    out = []
    for _ in range(SAMPLES):
        calls, t0 = 0, time.perf_counter()
        while True:
            run()
            calls += 1
            if calls % 4 == 0 or calls == 1:
                sync()  # a window ends on a synchronised clock
                if time.perf_counter() - t0 >= WINDOW_S:
                    break
        out.append(1e3 * (time.perf_counter() - t0) / calls)
    return Timed(ms=out, threads=threads)


def measure(framework: str, key: list[int], layout: str) -> Timed:
    """The shape ``key`` (batch, m, k, n as explain keys it) in ``framework``, timed in a fresh process;
    RuntimeError with the child's one-line reason when it fails."""
    from twinbench import runner

    if os.getenv(SWITCH) == "0":  # the caller asked for no processes (the test suite does)
        raise RuntimeError(f"not timed ({SWITCH}=0)")
    batch, m, k, n = key
    with tempfile.TemporaryDirectory(prefix="twinbench-shape-") as tmp:
        out = Path(tmp) / "timed.json"
        code, reason = runner.run_module("twinbench.explain.shape_ab",
                                         [framework, str(batch), str(m), str(k), str(n), layout or "NN", str(out)],
                                         TIMEOUT_S)
        if code != 0 or not out.is_file():
            raise RuntimeError(reason or f"the {framework} timing of the shape exited {code}")
        return msgspec.json.decode(read_small(out), type=Timed)


def verdict(a: Timed, b: Timed, a_calls: float, b_calls: float, traced_gap_ms: float) -> Verdict:
    """Whether the A/B's gap a step has the traced gap's sign and stands beyond the sides' spread a step."""
    noise = ((a.spread * a_calls) ** 2 + (b.spread * b_calls) ** 2) ** 0.5
    gap = b.median * b_calls - a.median * a_calls
    confirms = gap * traced_gap_ms > 0 and abs(gap) > BEYOND * noise
    return Verdict(a_ms=a.median, b_ms=b.median, a_calls=a_calls, b_calls=b_calls, noise_ms=noise,
                   confirms=confirms, threads=a.threads)


def _main(argv: list[str]) -> int:
    framework, batch, m, k, n, layout, out = argv
    timed = time_shape(framework, int(batch), int(m), int(k), int(n), layout)
    write_text(out, msgspec.json.encode(timed))
    return 0


if __name__ == "__main__":  # pragma: no cover - run by measure in a fresh process
    sys.exit(_main(sys.argv[1:]))

