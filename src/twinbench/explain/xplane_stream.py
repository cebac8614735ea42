"""An ``XSpace`` (``*.xplane.pb``) read from its file a field at a time, in bounded memory.

A protobuf has no index and protobuf's own parsers (and ``jax.profiler.ProfileData``) decode a message whole,
so a long profile decoded that way is held whole, then its events as objects. The wire format itself is a
sequence of (field, length, bytes): this module walks it through a buffer of :data:`BUFFER` bytes, skipping
what it does not read by its length. :func:`planes` lists the planes (name, where they lie in the file);
:func:`plane` reads one plane's metadata and its lines' heads (name, timestamp), not their events, which
:func:`events` then yields one at a time. A plane's metadata is written after its lines, so the lines are
read in a second pass over the plane's bytes: the file must be seekable (a gzipped profile is inflated to a
temporary file first, :class:`Source`).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from twinbench.explain import files, spill, xplane
from twinbench.explain.steps import TraceError
from twinbench.folder_io import open_file

#: bytes read from the file at a time
BUFFER = 1 << 20


class Source:
    """A profile's bytes as a seekable file: the file itself, or its gzip inflated to a temporary file (the
    stream's cap, :func:`files.stream`, applies); a context manager."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._store = spill.Spill()
        self.f: IO[bytes] | None = None

    def __enter__(self) -> Source:
        why = xplane.check_head(files.head(self.path)[:xplane.HEAD_CHECKED])
        if why is not None:  # refused from its first KiB: neither inflated nor walked
            raise TraceError(f"{self.path}: not a JAX profile ({why})")
        with files.stream(self.path, "profile") as s:
            if s.gzip:
                plain = self._store.path("xplane")
                try:
                    with open_file(plain, "wb") as out:
                        shutil.copyfileobj(s, out, BUFFER)
                except OSError as e:
                    self._store.close()
                    raise TraceError(spill._unwritable(e)) from None
            else:
                plain = self.path
        self.f = open_file(plain.resolve(), "rb")  # the one opener (a FIFO swapped in is refused, never waited on)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.f is not None:
            self.f.close()
        self._store.close()

    def size(self) -> int:
        assert self.f is not None
        self.f.seek(0, 2)
        return self.f.tell()


class _Fields:
    """The fields of the message in ``[start, end)`` of a file: (number, wire type, value, offset), the value
    an int for a varint, the payload's length for a length-delimited field (its bytes at ``offset``: read
    them with :meth:`payload`, or leave them), the raw bytes for a fixed-width one."""

    def __init__(self, f: IO[bytes], start: int, end: int) -> None:
        self.f, self.pos, self.end = f, start, end
        self.buf, self.at = b"", start  # the buffer and the file offset of its first byte

    def _need(self, n: int) -> None:
        if self.pos < self.at or self.pos + n > self.at + len(self.buf):
            self.f.seek(self.pos)
            self.buf, self.at = self.f.read(max(n, BUFFER)), self.pos

    def _varint(self) -> int:
        self._need(min(10, self.end - self.pos))
        buf, i = self.buf, self.pos - self.at
        out = shift = 0
        while True:
            if i >= len(buf):
                raise ValueError("a varint past the end of the file")
            b = buf[i]
            i += 1
            out |= (b & 0x7F) << shift
            if b < 0x80:
                break
            shift += 7
        self.pos = self.at + i
        return out

    def payload(self, offset: int, length: int) -> bytes:
        if length > BUFFER:  # read as it is, not through the buffer
            self.f.seek(offset)
            return self.f.read(length)
        self.pos = offset
        self._need(length)
        i = offset - self.at
        return self.buf[i:i + length]

    def __iter__(self) -> Iterator[tuple[int, int, Any, int]]:
        while self.pos < self.end:
            key = self._varint()
            num, wt = key >> 3, key & 7
            if num == 0:  # no protobuf message has a field 0: noise, refused where it starts
                raise ValueError(f"field number 0 at byte {self.pos - 1}: not a protobuf message")
            if wt == 0:
                yield num, wt, self._varint(), self.pos
            elif wt == 2:
                ln = self._varint()
                off = self.pos
                if off + ln > self.end:
                    raise ValueError("a field past the end of its message")
                yield num, wt, ln, off
                self.pos = off + ln
            elif wt in (1, 5):
                width = 8 if wt == 1 else 4
                off = self.pos
                v = self.payload(off, width)
                self.pos = off + width
                yield num, wt, v, off
            else:
                raise ValueError(f"unsupported wire type {wt}")


@dataclass
class PlaneAt:
    """A plane's name and where its message lies in the file."""

    name: str
    start: int
    end: int


@dataclass
class LineHead:
    """A line's name and timestamp, and where its message lies (its events are read by :func:`events`)."""

    name: str
    timestamp_ns: int
    start: int
    end: int


@dataclass
class Plane:
    name: str
    event_metadata: dict[int, xplane.EventMetadata] = field(default_factory=dict)
    stats: dict[str, xplane.Stat] = field(default_factory=dict)
    lines: list[LineHead] = field(default_factory=list)
    stat_names: dict[int, str] = field(default_factory=dict)


def planes(f: IO[bytes], size: int) -> list[PlaneAt]:
    """The space's planes, by name (a plane's id and name come before its lines; its lines are skipped)."""
    out = []
    for num, wt, ln, off in _Fields(f, 0, size):
        if num == xplane._SPACE_PLANES and wt == 2:
            name = ""
            for n, w, v, o in _Fields(f, off, off + ln):
                if n == xplane._PLANE_NAME and w == 2:
                    name = xplane._text(_Fields(f, o, o + v).payload(o, v))
                    break
            out.append(PlaneAt(name, off, off + ln))
    return out


def plane(f: IO[bytes], at: PlaneAt) -> Plane:
    """One plane's stats, event metadata (with their stats) and lines' heads, its events left in the file."""
    p = Plane(at.name)
    stat_names = p.stat_names
    stats: dict[str, xplane._RawStat] = {}
    walk = _Fields(f, at.start, at.end)
    for num, wt, ln, off in walk:
        if num == xplane._PLANE_STAT_MD and wt == 2:
            entry = {n: x for n, _w, x in xplane._fields(walk.payload(off, ln))}
            md = {n: x for n, _w, x in xplane._fields(entry.get(2, b""))}
            stat_names[entry.get(1, md.get(xplane._SMD_ID, 0))] = xplane._text(md.get(xplane._SMD_NAME, b""))
    for num, wt, ln, off in _Fields(f, at.start, at.end):
        if wt != 2:
            continue
        if num == xplane._PLANE_EVENT_MD:
            data = _Fields(f, off, off + ln).payload(off, ln)
            entry = {n: x for n, _w, x in xplane._fields(data)}
            mid, nm, disp = entry.get(1, 0), "", ""
            st: dict[str, xplane._RawStat] = {}
            for n, _w, x in xplane._fields(entry.get(2, b"")):
                if n == xplane._EMD_ID:
                    mid = x
                elif n == xplane._EMD_NAME:
                    nm = xplane._text(x)
                elif n == xplane._EMD_DISPLAY:
                    disp = xplane._text(x)
                elif n == xplane._EMD_STATS:
                    k, val = xplane._stat(x, stat_names)
                    st[k] = val
            p.event_metadata[mid] = xplane.EventMetadata(mid, nm, disp, xplane._resolve_refs(st, stat_names))
        elif num == xplane._PLANE_STATS:
            k, val = xplane._stat(_Fields(f, off, off + ln).payload(off, ln), stat_names)
            stats[k] = val
        elif num == xplane._PLANE_LINES:
            p.lines.append(_line_head(f, off, off + ln))
    p.stats = xplane._resolve_refs(stats, stat_names)
    return p


def _line_head(f: IO[bytes], start: int, end: int) -> LineHead:
    head = LineHead("", 0, start, end)
    walk = _Fields(f, start, end)
    seen = False
    for num, wt, v, off in walk:
        if num == xplane._LINE_NAME and wt == 2:
            head.name, seen = xplane._text(walk.payload(off, v)), True
        elif num == xplane._LINE_TS and wt == 0:
            head.timestamp_ns, seen = xplane._signed(v), True
        elif num == xplane._LINE_EVENTS and seen:  # name and timestamp come first, as a profiler writes a line
            break
    return head


def events_with_stats(f: IO[bytes], line: LineHead, names: dict[int, str]) -> Iterator[
        tuple[int, int, int, dict[str, xplane.Stat]]]:
    """A line's events with their own stats (by name, a reference resolved to the name it refers to, as
    ``jax.profiler.ProfileData`` gives them): (metadata id, offset ps, duration ps, stats)."""
    walk = _Fields(f, line.start, line.end)
    for num, wt, ln, off in walk:
        if num != xplane._LINE_EVENTS or wt != 2:
            continue
        mid = offset = dur = 0
        stats: dict[str, xplane._RawStat] = {}
        for n, _w, x in xplane._fields(walk.payload(off, ln)):
            if n == xplane._EV_MD:
                mid = x
            elif n == xplane._EV_OFFSET:
                offset = xplane._signed(x)
            elif n == xplane._EV_DUR:
                dur = xplane._signed(x)
            elif n == xplane._EV_STATS:
                k, val = xplane._stat(x, names)
                stats[k] = val
        yield mid, offset, dur, xplane._resolve_refs(stats, names) if stats else {}


def events(f: IO[bytes], line: LineHead) -> Iterator[tuple[int, int, int]]:
    """A line's events, one at a time: (metadata id, offset ps, duration ps); their own stats are skipped."""
    varint, signed = xplane._varint, xplane._signed
    pos, end = line.start, line.end
    buf, at = b"", pos

    def fill(start: int, n: int) -> tuple[bytes, int]:
        f.seek(start)
        return f.read(min(max(n, BUFFER), end - start)), start

    while pos < end:
        if pos + 20 > at + len(buf):  # a key and a length
            buf, at = fill(pos, 20)
        i = pos - at
        key, i = varint(buf, i)
        wt = key & 7
        if wt == 0:
            _, i = varint(buf, i)
            pos = at + i
        elif wt == 1 or wt == 5:
            pos = at + i + (8 if wt == 1 else 4)
        elif wt == 2:
            ln, i = varint(buf, i)
            start = at + i
            if start + ln > end:
                raise ValueError("an event past the end of its line")
            if key >> 3 == xplane._LINE_EVENTS:
                if i + ln > len(buf):
                    buf, at = fill(start, ln)
                    i = 0
                j, stop = i, i + ln
                mid = offset = dur = 0
                while j < stop:
                    k, j = varint(buf, j)
                    w = k & 7
                    if w == 0:
                        v, j = varint(buf, j)
                        n = k >> 3
                        if n == xplane._EV_MD:
                            mid = v
                        elif n == xplane._EV_OFFSET:
                            offset = signed(v)
                        elif n == xplane._EV_DUR:
                            dur = signed(v)
                    elif w == 2:
                        n2, j = varint(buf, j)
                        j += n2
                    elif w == 1 or w == 5:
                        j += 8 if w == 1 else 4
                    else:
                        raise ValueError(f"unsupported wire type {w}")
                yield mid, offset, dur
            pos = start + ln
        else:
            raise ValueError(f"unsupported wire type {wt}")
