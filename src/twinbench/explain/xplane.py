"""A reader (and writer) of the ``XSpace`` protobuf a ``jax.profiler`` trace saves (``*.xplane.pb``), written
against the wire format of tsl's ``xplane.proto`` so it needs no generated module.

``jax.profiler.ProfileData`` gives each event's own stats but not its *metadata's* stats, and on a TPU those
hold what an op is: ``hlo_category``, ``tf_op`` (the JAX ``op_name`` path), ``source``, ``flops``,
``bytes_accessed``. This module decodes the planes named, with their event and stat metadata, and can write a
trimmed space back (the test fixtures are TPU profiles cut to a few steps). explain's readers walk a profile
from its file with :mod:`.xplane_stream` (which uses this module's field decoders); :func:`read` decodes a
space held whole (the trimming tools, the benchmark's generator).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

# field numbers of tsl/profiler/protobuf/xplane.proto
_SPACE_PLANES = 1
_PLANE_ID, _PLANE_NAME, _PLANE_LINES, _PLANE_EVENT_MD, _PLANE_STAT_MD, _PLANE_STATS = 1, 2, 3, 4, 5, 6
_LINE_ID, _LINE_NAME, _LINE_TS, _LINE_EVENTS, _LINE_DUR, _LINE_DISPLAY_ID, _LINE_DISPLAY = 1, 2, 3, 4, 9, 10, 11
_EV_MD, _EV_OFFSET, _EV_DUR, _EV_STATS = 1, 2, 3, 4
_EMD_ID, _EMD_NAME, _EMD_DISPLAY, _EMD_STATS = 1, 2, 4, 5
_SMD_ID, _SMD_NAME = 1, 2


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    out = shift = 0
    while True:
        b = buf[i]
        i += 1
        out |= (b & 0x7F) << shift
        if b < 0x80:
            return out, i
        shift += 7


def _fields(buf: bytes) -> list[tuple[int, int, Any]]:
    """(field number, wire type, value) of one message: ints for varints/fixed, bytes for length-delimited."""
    out: list[tuple[int, int, Any]] = []
    i, n = 0, len(buf)
    while i < n:
        key, i = _varint(buf, i)
        num, wt = key >> 3, key & 7
        if num == 0:  # no protobuf message has a field 0: zeros or noise, refused at the first byte
            raise ValueError("field number 0: not a protobuf message")
        if wt == 0:
            v, i = _varint(buf, i)
        elif wt == 1:
            v = buf[i:i + 8]
            i += 8
        elif wt == 2:
            ln, i = _varint(buf, i)
            v = buf[i:i + ln]
            i += ln
        elif wt == 5:
            v = buf[i:i + 4]
            i += 4
        else:
            raise ValueError(f"unsupported wire type {wt}")
        out.append((num, wt, v))
    return out


def _signed(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


#: one stat's value, as its ``XStat`` holds it (a double, an unsigned or signed integer, a string, bytes; a
#: reference to another stat's name is resolved to that name); None where it holds none. Which stats a plane,
#: an event or its metadata carries varies by producer: each is kept by its name, read where it is used
Stat = float | int | str | bytes | None
#: a stat as read, before its reference (("ref", the id of the name it refers to)) is resolved
_RawStat = Stat | tuple[str, int]


@dataclass
class Event:
    metadata_id: int
    offset_ps: int
    duration_ps: int
    stats: dict[str, Stat] = field(default_factory=dict)


@dataclass
class Line:
    name: str
    timestamp_ns: int
    events: list[Event] = field(default_factory=list)
    raw: list[tuple[int, int, Any]] = field(default_factory=list)


@dataclass
class EventMetadata:
    id: int
    name: str
    display_name: str
    stats: dict[str, Stat] = field(default_factory=dict)


@dataclass
class Plane:
    name: str
    lines: list[Line] = field(default_factory=list)
    event_metadata: dict[int, EventMetadata] = field(default_factory=dict)
    stats: dict[str, Stat] = field(default_factory=dict)
    stat_names: dict[int, str] = field(default_factory=dict)
    raw: list[tuple[int, int, Any]] = field(default_factory=list)  # the plane's fields as read


def _stat(buf: bytes, names: dict[int, str]) -> tuple[str, _RawStat]:
    mid, val = 0, None
    val: _RawStat
    for num, _wt, v in _fields(buf):
        if num == 1:
            mid = v
        elif num == 2:
            val = struct.unpack("<d", v)[0]
        elif num in (3,):
            val = v
        elif num == 4:
            val = _signed(v)
        elif num == 5:
            val = _text(v)
        elif num == 6:
            val = bytes(v)
        elif num == 7:
            val = ("ref", v)
    return names.get(mid, str(mid)), val


def _resolve_refs(stats: dict[str, _RawStat], names: dict[int, str]) -> dict[str, Stat]:
    return {k: (names.get(v[1], "") if isinstance(v, tuple) else v) for k, v in stats.items()}


#: the longest string kept from a profile (a name, a stat): a longer one is cut where it is read. An event's
#: metadata may hold its instruction's HLO text (a custom call's target after its operands): room for that
MAX_TEXT = 1 << 16


def _text(v: bytes | memoryview) -> str:
    """A string field, cut at :data:`MAX_TEXT` (a name of any length costs no more than a long one from here on)."""
    return bytes(v[:MAX_TEXT * 4]).decode("utf-8", "replace")[:MAX_TEXT]


#: the bytes of a file :func:`check_head` reads: an XSpace's first fields, enough to tell one from noise
HEAD_CHECKED = 1024
#: an XSpace's fields (planes, errors, warnings, hostnames; room for a few more): each length-delimited
_SPACE_FIELDS = range(1, 9)


def check_head(head: bytes) -> str | None:
    """Why the first bytes of a file cannot begin a serialized ``XSpace`` (None when they can): every field of an
    XSpace is length-delimited and numbered 1 to a few, and the first must be a plane or a string that fits in
    the file; zeros, text, JSON and another message fail within :data:`HEAD_CHECKED` bytes, before the file is
    inflated or walked (a walk of noise costs time with every byte)."""
    buf, i, seen = memoryview(head)[:HEAD_CHECKED], 0, 0
    while i < len(buf):
        try:
            key, j = _varint(buf, i)
        except IndexError:
            break  # a key cut by the end of the head: as far as it can be told
        num, wt = key >> 3, key & 7
        if num not in _SPACE_FIELDS or wt != 2:
            return f"field {num} of wire type {wt} at byte {i}, where an XSpace has only strings and planes"
        try:
            ln, j = _varint(buf, j)
        except IndexError:
            break
        if num == _SPACE_PLANES and j < len(buf):  # a plane begins with its id, name or lines: a field 1..8
            inner = buf[j:j + min(ln, 16)]
            try:
                k, _ = _varint(inner, 0) if inner else (8, 0)
            except IndexError:
                k = 8
            if not 1 <= k >> 3 <= 8 or (k & 7) not in (0, 1, 2, 5):
                return f"a plane at byte {j} that does not begin as one"
        seen += 1
        i = j + ln
    return None if seen or not head else "no field an XSpace begins with"


def plane_names(data: bytes) -> list[str]:
    names = []
    for num, wt, v in _fields(memoryview(data)):  # views, not copies, of the planes' bytes
        if num == _SPACE_PLANES and wt == 2:  # another message's field 1 (a number) is no plane
            names.append(next((_text(p) for n, _w, p in _fields(v) if n == _PLANE_NAME), ""))
    return names


def read(data: bytes, want: Any = None, keep_raw: bool = False) -> list[Plane]:
    """The planes of a serialized ``XSpace`` whose name ``want(name)`` accepts (all when ``want`` is None).

    Decoding is whole-message (a protobuf has no index), so ``data`` is the whole file; what is built from it
    is the planes asked for, read through views of ``data`` (no copies), their fields as read (``raw``, the
    trimming tools' input) only with ``keep_raw``."""
    planes = []
    for num, wt, v in _fields(data if keep_raw else memoryview(data)):
        if num != _SPACE_PLANES or wt != 2:
            continue
        fs = _fields(v)
        name = next((_text(p) for n, _w, p in fs if n == _PLANE_NAME), "")
        if want is not None and not want(name):
            continue
        planes.append(_plane(name, fs, keep_raw))
    return planes


def _plane(name: str, fs: list[tuple[int, int, Any]], keep_raw: bool = False) -> Plane:
    p = Plane(name, raw=fs if keep_raw else [])
    plane_stats: dict[str, _RawStat] = {}
    for num, _wt, v in fs:
        if num == _PLANE_STAT_MD:
            entry = dict((n, x) for n, _w, x in _fields(v))
            md = dict((n, x) for n, _w, x in _fields(entry.get(2, b"")))
            p.stat_names[entry.get(1, md.get(_SMD_ID, 0))] = _text(md.get(_SMD_NAME, b""))
    for num, _wt, v in fs:
        if num == _PLANE_EVENT_MD:
            entry = dict((n, x) for n, _w, x in _fields(v))
            md = _fields(entry.get(2, b""))
            mid, nm, disp = entry.get(1, 0), "", ""
            stats: dict[str, _RawStat] = {}
            for n, _w, x in md:
                if n == _EMD_ID:
                    mid = x
                elif n == _EMD_NAME:
                    nm = _text(x)
                elif n == _EMD_DISPLAY:
                    disp = _text(x)
                elif n == _EMD_STATS:
                    k, val = _stat(x, p.stat_names)
                    stats[k] = val
            p.event_metadata[mid] = EventMetadata(mid, nm, disp, _resolve_refs(stats, p.stat_names))
        elif num == _PLANE_STATS:
            k, val = _stat(v, p.stat_names)
            plane_stats[k] = val
        elif num == _PLANE_LINES:
            p.lines.append(_line(v, p.stat_names, keep_raw))
    p.stats = _resolve_refs(plane_stats, p.stat_names)
    return p


def _line(buf: bytes, names: dict[int, str], keep_raw: bool = False) -> Line:
    fs = _fields(buf)
    line = Line("", 0, raw=fs if keep_raw else [])
    for num, _wt, v in fs:
        if num == _LINE_NAME:
            line.name = _text(v)
        elif num == _LINE_TS:
            line.timestamp_ns = _signed(v)
        elif num == _LINE_EVENTS:
            ev = Event(0, 0, 0)
            ev_stats: dict[str, _RawStat] = {}
            for n, _w, x in _fields(v):
                if n == _EV_MD:
                    ev.metadata_id = x
                elif n == _EV_OFFSET:
                    ev.offset_ps = _signed(x)
                elif n == _EV_DUR:
                    ev.duration_ps = _signed(x)
                elif n == _EV_STATS:
                    k, val = _stat(x, names)
                    ev_stats[k] = val
            ev.stats = _resolve_refs(ev_stats, names)
            line.events.append(ev)
    return line


# ------------------------------------------------------------------------------------------------ writing
def _put_varint(v: int) -> bytes:
    v &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def encode(fields: list[tuple[int, int, Any]]) -> bytes:
    """One message from (field number, wire type, value) as :func:`_fields` reads them."""
    out = bytearray()
    for num, wt, v in fields:
        out += _put_varint(num << 3 | wt)
        if wt == 0:
            out += _put_varint(v)
        elif wt == 2:
            out += _put_varint(len(v)) + bytes(v)
        else:
            out += bytes(v)
    return bytes(out)


def fields_of(buf: bytes) -> list[tuple[int, int, Any]]:
    """The (field number, wire type, value) of one serialized message (for tools that rewrite a space)."""
    return _fields(buf)
