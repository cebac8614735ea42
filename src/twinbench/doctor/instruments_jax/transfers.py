"""Host-to-device copies: the transfer guard's ``log`` lines (written by XLA's C++ logger to fd 2, read back
by :class:`StderrTee`) and the machine's copy bandwidth and latency."""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from typing import Any

from twinbench.doctor.observed import H2D
from twinbench.doctor.recorder import Recorder


class StderrTee:
    """Route fd 2 through a pipe, count the transfer guard's lines, pass every other line on unchanged.

    XLA's C++ logger writes the transfer guard's ``log`` lines straight to file descriptor 2, so Python's
    ``sys.stderr`` never sees them: the only way to count them is to read fd 2 back.
    """

    MARK = b"host-to-device transfer:"
    AVAL = re.compile(rb"aval=ShapedArray\((\w+)\[([^\]]*)\]")

    def __init__(self, rec: Recorder) -> None:
        self.rec = rec
        sys.stderr.flush()
        self.saved = os.dup(2)
        read, write = os.pipe()
        os.dup2(write, 2)
        os.close(write)
        self.read = read
        self.thread = threading.Thread(target=self._pump, name="twinbench-doctor-stderr", daemon=True)
        self.thread.start()

    def _pump(self) -> None:
        buf = b""
        with os.fdopen(self.read, "rb", buffering=0) as pipe:
            while chunk := pipe.read(65536):
                buf += chunk
                *lines, buf = buf.split(b"\n")
                out = []
                for line in lines:
                    if self.MARK in line:
                        self._count(line)
                    else:
                        out.append(line + b"\n")
                if out:
                    os.write(self.saved, b"".join(out))
        if buf:
            os.write(self.saved, buf)

    def _count(self, line: bytes) -> None:
        if self.rec.internal:
            return
        self.rec.count("h2d_guard")
        m = self.AVAL.search(line)
        if m and m.group(2).strip():  # a shaped (non-scalar) array; scalars (a learning rate) are cheap
            self.rec.count("h2d_guard_arrays")

    def close(self) -> None:
        sys.stderr.flush()
        os.dup2(self.saved, 2)  # closes the pipe's last write end: the pump sees EOF and drains
        self.thread.join(timeout=5)


def _measure_h2d(jax: Any) -> H2D:
    """Host-to-device bandwidth (a 32 MiB copy, best of 3) and per-transfer latency (a 16-float copy)."""
    import numpy as np

    def best(x: Any) -> float:
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            jax.block_until_ready(jax.device_put(x))
            times.append(time.perf_counter() - t0)
        return min(times)

    big = np.ones(2**23, np.float32)  # 32 MiB: long enough that the copy, not the call, is timed
    latency = best(np.ones(16, np.float32))
    # The whole copy's time, latency included (subtracting it can leave nothing and an impossible bandwidth).
    return H2D(bytes_per_s=big.nbytes / max(best(big), 1e-6), latency_s=latency)
