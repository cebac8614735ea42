"""A results folder is data: the one reader and the one writer of what twinbench keeps in a folder.

The writer puts every file twinbench writes (``results.jsonl``, ``summary.md``, ``report.html``, ``plots/``,
settings, verdicts, its lock) *inside* the folder it was given, whatever links the folder holds: each component
below the folder is opened with ``O_NOFOLLOW`` relative to its parent, a whole file is written beside its name
and renamed over it, an append opens the file itself with ``O_NOFOLLOW``. A symbolic link where twinbench writes
is refused with one line naming the link (:class:`LinkRefused`), before any run where it can be seen.

The reader bounds what a folder can make twinbench hold: a file over its cap is refused from its size alone
(a sparse 2 GB ``results.jsonl`` costs a ``stat``), a line over its cap is skipped without being held, a string
field is cut (or, for a field that names a run, rejects its record) and a settings file passes an allow-list of
fields and types. Every figure here is a cap on data, never a measurement.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from twinbench.config import SpecError

#: a results file (or any other file read from a folder) larger than this is refused from its size
MAX_FILE_MB = 256
#: the environment variable that sets :data:`MAX_FILE_MB` (a whole number of MB)
MAX_FILE_ENV = "TWINBENCH_MAX_RESULTS_MB"
#: a line of a results file longer than this is skipped (never held whole); a record is a few KB
MAX_LINE = 8 << 20
#: a settings or state file (claims-settings.json, a sweep's state) larger than this is refused
MAX_SETTINGS = 1 << 20
#: a string anywhere in a record longer than this is cut (a field that names a run: rejects the record)
MAX_STRING = 64 << 10
#: fields that name a run (its label, its identity): longer than this, the record is rejected
MAX_NAME = 256


class LinkRefused(SpecError):
    """A symbolic link (or a hard-linked file) where twinbench was to write: the message names the link."""


class TooLarge(OSError):
    """A file read from a folder over its cap: the message says its size, the cap and how to raise it."""


# ----------------------------------------------------------------------------------------------- the writer

def _is_link(dir_fd: int, name: str) -> str | None:
    """Where ``name`` (in the folder of ``dir_fd``) points when it is a symbolic link, else None."""
    try:
        return os.readlink(name, dir_fd=dir_fd)
    except OSError:
        return None


def _refuse(path: Path, target: str) -> LinkRefused:
    return LinkRefused(f"{path}: a symbolic link (to {target}); twinbench writes nothing through a link in a "
                       "folder it reads or writes (remove the link, or choose another folder)")


def _parts(rel: str | Path) -> list[str]:
    parts = [p for p in Path(rel).parts if p not in ("", ".")]
    if any(p == ".." or os.sep in p for p in parts) or Path(rel).is_absolute():
        raise ValueError(f"{rel}: not a path inside its folder")
    return parts


@contextlib.contextmanager
def _folder(root: Path, parts: list[str], create: bool) -> Iterator[int]:
    """An fd of ``root/parts...``: each part below ``root`` created when ``create``, and never a link."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for i, part in enumerate(parts):
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o755, dir_fd=fd)
            try:
                nfd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except OSError as e:
                target = _is_link(fd, part)
                if target is not None:
                    raise _refuse(Path(root, *parts[:i + 1]), target) from None
                raise OSError(e.errno, e.strerror, str(Path(root, *parts[:i + 1]))) from None
            os.close(fd)
            fd = nfd
        yield fd
    finally:
        os.close(fd)


def make_dir(root: Path, rel: str | Path) -> Path:
    """``root/rel`` created (with its parents below ``root``), none of them a link: :class:`LinkRefused`."""
    with _folder(Path(root), _parts(rel), create=True):
        pass
    return Path(root, rel)


def check_inside(root: Path, rel: str | Path) -> None:
    """:class:`LinkRefused` when ``root/rel`` or a folder between is a symbolic link (nothing is created)."""
    parts = _parts(rel)
    if not Path(root).is_dir():
        return
    try:
        with _folder(Path(root), parts[:-1], create=False) as fd:
            target = _is_link(fd, parts[-1]) if parts else None
    except FileNotFoundError:
        return
    except LinkRefused:
        raise
    except OSError:
        return
    if target is not None:
        raise _refuse(Path(root, rel), target)


def write_file(root: Path, rel: str | Path, data: bytes | str) -> Path:
    """Write ``data`` to ``root/rel`` (its folders below ``root`` created): beside it first, then renamed over it,
    so a reader never sees half a file and a hard link elsewhere keeps its content. A link is refused."""
    parts = _parts(rel)
    blob = data.encode() if isinstance(data, str) else bytes(data)
    with _folder(Path(root), parts[:-1], create=True) as fd:
        name = parts[-1]
        target = _is_link(fd, name)
        if target is not None:
            raise _refuse(Path(root, rel), target)
        tmp = f".{name}.{os.getpid()}.tmp"
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=fd)
        out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=fd)
        try:
            try:
                write_all(out, blob)
            finally:
                os.close(out)
            os.replace(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=fd)
            raise
    return Path(root, rel)


def open_append(path: Path, flags: int = os.O_RDWR) -> int:
    """An fd appending to ``path`` (created when missing), never through a link: a symbolic link, or a file with
    other hard links (an append would change the file they name), is :class:`LinkRefused`."""
    path = Path(path)
    with _folder(path.parent, [], create=False) as dfd:
        try:
            fd = os.open(path.name, flags | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o644, dir_fd=dfd)
        except OSError as e:
            target = _is_link(dfd, path.name)
            if target is not None or e.errno == errno.ELOOP:
                raise _refuse(path, target or "?") from None
            raise
    if os.fstat(fd).st_nlink > 1:
        os.close(fd)
        raise LinkRefused(f"{path}: has other hard links; twinbench appends to no file another name shares (copy "
                          "it, or choose another folder)")
    return fd


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


#: entries a results folder is searched for links (a folder of more is no folder twinbench wrote alone)
MAX_ENTRIES = 20000


def check_folder(root: Path, names: tuple[str, ...] = ()) -> None:
    """Refuse (:class:`LinkRefused`, one line naming it) a results folder that holds a symbolic link, at any depth
    (its records, summary, report, plots, probes, repeats, a user model's weights all go inside it; twinbench
    makes no link there): checked before any run, so nothing is measured only to be refused. ``names``: only
    those entries of ``root`` (its lock, say). The search is bounded by :data:`MAX_ENTRIES`."""
    root = Path(root)
    if not root.is_dir():
        return
    if names:
        for name in names:
            check_inside(root, name)
        return
    seen, todo = 0, [Path()]
    while todo and seen < MAX_ENTRIES:
        rel = todo.pop()
        try:
            it = os.scandir(root / rel)
        except OSError:
            continue
        with it:
            for entry in it:
                seen += 1
                if seen >= MAX_ENTRIES:
                    break
                if entry.is_symlink():
                    check_inside(root, rel / entry.name)
                elif entry.is_dir(follow_symlinks=False) and len(rel.parts) < 6:
                    todo.append(rel / entry.name)


# ----------------------------------------------------------------------------------------------- the reader

def max_file_bytes() -> int:
    raw = os.environ.get(MAX_FILE_ENV, "")
    return (int(raw) if raw.isdigit() and int(raw) > 0 else MAX_FILE_MB) << 20


def _size(n: float) -> str:
    return f"{n / 2**30:.1f} GB" if n >= 2**30 else f"{n / 2**20:.0f} MB" if n >= 2**20 else f"{n:.0f} bytes"


def _check(path: Path, st: os.stat_result, cap: int | None) -> int:
    if not stat.S_ISREG(st.st_mode):
        raise OSError(f"{path} is not a regular file")
    cap = max_file_bytes() if cap is None else cap
    if st.st_size > cap:
        hint = f"; {MAX_FILE_ENV} raises the cap" if cap == max_file_bytes() else ""
        raise TooLarge(f"{path} is {_size(st.st_size)}, over the {_size(cap)} twinbench reads of such a file{hint}")
    return st.st_size


def check_readable(path: Path, cap: int | None = None) -> int:
    """The size of ``path``, a regular file within ``cap`` bytes (default :func:`max_file_bytes`); an OSError
    (:class:`TooLarge` over the cap) that says why not. A device, a FIFO or a folder is never opened."""
    return _check(Path(path), os.stat(path), cap)


def _open(path: Path, cap: int | None) -> BinaryIO:
    """``path`` opened for reading once it is known to be a regular file within ``cap`` (checked on the open file:
    a FIFO swapped in after a check is never waited on)."""
    check_readable(path, cap)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        _check(Path(path), os.fstat(fd), cap)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


def lines(path: Path, cap: int | None = None, max_line: int | None = None) -> Iterator[tuple[int, bytes | None]]:
    """``(line number, line)`` of a file within its cap, read as a stream; a line over ``max_line`` bytes
    (default :data:`MAX_LINE`) comes as ``None`` (its bytes are read past in chunks, never held whole)."""
    max_line = MAX_LINE if max_line is None else max_line
    with _open(Path(path), cap) as f:
        n = 0
        while True:
            line = f.readline(max_line + 1)
            if not line:
                return
            n += 1
            if len(line) > max_line and not line.endswith(b"\n"):
                while True:  # the rest of a line too long to keep
                    chunk = f.readline(1 << 20)
                    if not chunk or chunk.endswith(b"\n"):
                        break
                yield n, None
                continue
            yield n, line


def read_small(path: Path, cap: int = MAX_SETTINGS) -> bytes:
    """A whole small file (settings, state, a verdicts file) within ``cap`` bytes; OSError otherwise."""
    with _open(Path(path), cap) as f:
        data = f.read(cap + 1)
    if len(data) > cap:  # grew since its size was read
        raise TooLarge(f"{path} is over the {_size(cap)} twinbench reads of such a file")
    return data


def read_json(path: Path, cap: int = MAX_SETTINGS) -> Any:
    """The JSON value of a small file; OSError or ValueError (one line each) when it is not."""
    text = read_small(path, cap).decode("utf-8", errors="replace")
    try:
        return json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number a file of twinbench may hold")


#: what no string read from a folder keeps: control characters but newline and tab (a terminal's escape codes,
#: a carriage return that rewrites a printed line) and the bidirectional overrides that reorder one
_STORED = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def cut(v: Any, limit: int = MAX_STRING) -> Any:
    """``v`` with every string (in nested lists and dicts too) cut to ``limit`` characters and stripped of
    control characters (newlines and tabs kept): what a record or a settings file says is printed as text."""
    if isinstance(v, str):
        v = v if len(v) <= limit else v[:limit] + "..."
        return _STORED.sub("", v) if _STORED.search(v) else v
    if isinstance(v, dict):
        return {cut(k, MAX_NAME) if isinstance(k, str) else k: cut(x, limit) for k, x in v.items()}
    if isinstance(v, list):
        return [cut(x, limit) for x in v]
    return v


# ---------------------------------------------------------------------------------------- settings allow-list

def typed(path: Path | str, data: Any, allowed: dict[str, tuple[type, ...]]) -> dict[str, Any]:
    """The fields of ``data`` (a parsed settings file) that ``allowed`` names, each of one of its types (None
    always allowed); a field of another type is a SpecError naming it. Fields not allowed are dropped."""
    if not isinstance(data, dict):
        raise SpecError(f"{path}: a JSON {type(data).__name__}, not a settings object")
    out: dict[str, Any] = {}
    for name, types in allowed.items():
        v = data.get(name)
        if v is None:
            out[name] = None
            continue
        ok = isinstance(v, types) and not (isinstance(v, bool) and bool not in types)
        if ok and isinstance(v, float) and not math.isfinite(v):
            ok = False
        if ok and isinstance(v, str) and len(v) > MAX_NAME:
            raise SpecError(f"{path}: {name} is a {len(v)}-character string; at most {MAX_NAME}")
        if not ok:
            want = " or ".join(t.__name__ for t in types)
            article = "an" if want[0] in "aeiou" else "a"
            raise SpecError(f"{path}: {name} is {terminal(json.dumps(v), 40)} ({type(v).__name__}), not {article} "
                            f"{want}")
        out[name] = v
    return out


# ------------------------------------------------------------------------------------------- the terminal

#: data printed to the terminal is cut to this many characters (a name, a record's field, an op name)
WIDTH = 200


def terminal(text: Any, width: int = WIDTH) -> str:
    """``text`` fit to print: control characters (escape codes, carriage returns, bidirectional overrides)
    removed, newlines and tabs made spaces, cut to ``width`` characters. Data from a file never writes to the
    terminal anything but its own characters."""
    s = str(text)
    if len(s) > width * 4:
        s = s[:width * 4]
    s = _STORED.sub("", s.replace("\n", " ").replace("\t", " "))
    return s if len(s) <= width else s[:width - 3] + "..."
