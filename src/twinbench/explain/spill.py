"""Records kept on disk, so that a long trace's reader holds a chunk of them at a time, never all.

:class:`Columns` is a table filled a row at a time (a trace's events as they are parsed): its rows stay in
memory until :data:`CHUNK` of them are held, then go to one file per column; :meth:`Columns.chunks` reads them
back a chunk at a time. :class:`Parts` is a set of numbered files of numpy records (a bucket of events by time,
a partition of launches by correlation id), appended to in any order and read back one part at a time. Both
live in one temporary folder, removed by :meth:`Spill.close`.
"""

from __future__ import annotations

import shutil
import tempfile
from array import array
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from twinbench.explain.steps import TraceError

#: rows held in memory before they go to disk, and the rows read back at a time
CHUNK = 1 << 18
#: the records a part (a bucket of events, a partition of launches) is meant to hold: what is in memory at once
PART = 1 << 18


class Spill:
    """A temporary folder for a reader's records, made on first use."""

    def __init__(self) -> None:
        self._dir: Path | None = None
        self._n = 0

    def path(self, stem: str) -> Path:
        if self._dir is None:
            try:
                self._dir = Path(tempfile.mkdtemp(prefix="twinbench_trace_"))
            except OSError as e:
                raise TraceError(_unwritable(e)) from None
        self._n += 1
        return self._dir / f"{stem}_{self._n}"

    def close(self) -> None:
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None


def _unwritable(e: OSError) -> str:
    return (f"cannot write the temporary folder a trace's reader keeps its records in ({e.strerror or e}): set "
            "TMPDIR to a writable folder with room")


def _append(path: Path, data: Any) -> None:
    """``data`` (an array or numpy records) appended to ``path``; a full or unwritable disk is one line."""
    try:
        with path.open("ab") as f:
            data.tofile(f)
    except OSError as e:
        raise TraceError(_unwritable(e)) from None


class Columns:
    """Columns of numbers (``spec``: name -> array typecode) appended a row at a time; the rows beyond
    :data:`CHUNK` in memory go to disk. The in-memory columns are attributes (``self.ts``...) for the appender."""

    def __init__(self, spill: Spill, spec: dict[str, str], chunk: int | None = None) -> None:
        self._spill, self._spec = spill, spec
        self.chunk = chunk or CHUNK
        self._files: dict[str, Path] = {}
        self.on_disk = 0  # rows written
        for k, t in spec.items():
            setattr(self, k, array(t))

    def __len__(self) -> int:
        return self.on_disk + len(getattr(self, next(iter(self._spec))))

    def flush(self) -> None:
        """The rows in memory, written to their columns' files."""
        for k in self._spec:
            col = getattr(self, k)
            path = self._files.get(k)
            if path is None:
                path = self._files[k] = self._spill.path(k)
            _append(path, col)
        self.on_disk += len(getattr(self, next(iter(self._spec))))
        for k, t in self._spec.items():
            setattr(self, k, array(t))

    def chunks(self, names: tuple[str, ...] | None = None) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
        """(the first row, its columns) a chunk at a time, in row order: those on disk, then those in memory."""
        names = names or tuple(self._spec)
        for start in range(0, self.on_disk, self.chunk):
            count = min(self.chunk, self.on_disk - start)
            out = {}
            for k in names:
                dt = np.dtype(self._spec[k])
                out[k] = np.fromfile(self._files[k], dtype=dt, count=count, offset=start * dt.itemsize)
            yield start, out
        tail = {k: np.frombuffer(getattr(self, k), dtype=np.dtype(self._spec[k])) for k in names}
        if len(next(iter(tail.values()))):
            yield self.on_disk, tail


class Parts:
    """Numbered files of numpy records of one ``dtype``: appended to by part, read back one part at a time."""

    def __init__(self, spill: Spill, dtype: np.dtype[Any], n: int) -> None:
        self.dtype, self.n = dtype, n
        self._paths = [spill.path("part") for _ in range(n)]
        self.sizes = [0] * n

    def add(self, part: np.ndarray, records: np.ndarray) -> None:
        """``records`` (of this dtype) to the parts ``part`` names, one per record; each part keeps their order."""
        if not len(records):
            return
        order = np.argsort(part, kind="stable")
        part, records = part[order], records[order]
        cuts = np.flatnonzero(np.diff(part)) + 1
        for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, len(part)], strict=True):
            p = int(part[lo])
            _append(self._paths[p], records[lo:hi])
            self.sizes[p] += int(hi - lo)

    def read(self, p: int, keep: bool = False) -> np.ndarray:
        """Part ``p``'s records in the order they were added; its file removed unless ``keep``."""
        if not self.sizes[p]:
            return np.zeros(0, dtype=self.dtype)
        out = np.fromfile(self._paths[p], dtype=self.dtype)
        if not keep:
            self._paths[p].unlink()
            self.sizes[p] = 0
        return out
