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


# ----------------------------------------------------------------------------------------------- the opener

class NotRegular(OSError):
    """A path twinbench was to open that is not a regular file (a FIFO, a device, a socket, a folder): refused
    without waiting on it."""


_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"))

_MODES = {"r": os.O_RDONLY, "r+": os.O_RDWR, "w": os.O_WRONLY | os.O_CREAT, "w+": os.O_RDWR | os.O_CREAT,
          "a": os.O_WRONLY | os.O_CREAT | os.O_APPEND, "a+": os.O_RDWR | os.O_CREAT | os.O_APPEND,
          "x": os.O_WRONLY | os.O_CREAT | os.O_EXCL}


def kind_of(st: os.stat_result) -> str:
    """What a non-regular file is, in words (``a FIFO``)."""
    return next((what for test, what in _KINDS if test(st.st_mode)), "not a regular file")


def open_fd(path: str | Path, mode: str = "r", *, root: str | Path | None = None, cap: int | None = None,
            perm: int = 0o644) -> int:
    """The one opener: an fd of ``path`` opened in ``mode`` (``r``, ``r+``, ``w``, ``w+``, ``a``, ``a+``, ``x``;
    ``b``/``t`` ignored), never blocking and never through a link.

    Every component of ``path`` below ``root`` (default: its own folder, so the file itself) is opened with
    ``O_NOFOLLOW`` relative to its parent's fd: a symbolic link there is :class:`LinkRefused` naming it, found as
    it is opened (no scan of the folder first, so none can be outrun). The file is opened ``O_NONBLOCK`` and
    checked on the open fd: what is not a regular file (a FIFO, a device) is :class:`NotRegular` at once, never
    waited on; a file read (``r``) over ``cap`` bytes is :class:`TooLarge`. ``w`` truncates only once the file is
    known to be regular. ``root`` itself (the folder the user named) is taken as named."""
    path = Path(path)
    base = mode.replace("b", "").replace("t", "")
    if base not in _MODES:
        raise ValueError(f"open_fd: mode {mode!r}")
    if root is None:
        root, parts = path.parent, [path.name]
    else:
        rel = path.relative_to(root) if path.is_absolute() == Path(root).is_absolute() else path
        parts = _parts(rel)
    if not parts or parts[-1] in ("", ".", ".."):
        raise NotRegular(errno.EISDIR, "a folder, not a file", str(path))
    flags = _MODES[base] | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    with _folder(Path(root), parts[:-1], create=False) as dfd:
        try:
            fd = os.open(parts[-1], flags, perm, dir_fd=dfd)
        except OSError as e:
            target = _is_link(dfd, parts[-1])
            if target is not None or e.errno == errno.ELOOP:
                raise _refuse(path, target or "?") from None
            if e.errno in (errno.ENXIO, errno.EISDIR):  # a FIFO no one reads (write, O_NONBLOCK); a folder
                what = "a FIFO" if e.errno == errno.ENXIO else "a folder"
                raise NotRegular(e.errno, f"{what}, not a regular file", str(path)) from None
            raise OSError(e.errno, e.strerror, str(path)) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegular(errno.EINVAL, f"{kind_of(st)}, not a regular file", str(path))
        if base == "r" and cap is not None and st.st_size > cap:
            hint = f"; {MAX_FILE_ENV} raises the cap" if cap == max_file_bytes() else ""
            raise TooLarge(f"{path} is {_size(st.st_size)}, over the {_size(cap)} twinbench reads of such a "
                           f"file{hint}")
        if base in ("w", "w+"):
            os.ftruncate(fd, 0)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_file(path: str | Path, mode: str = "rb", *, root: str | Path | None = None, cap: int | None = None,
              perm: int = 0o644, encoding: str = "utf-8") -> Any:
    """:func:`open_fd` as a file object (binary with ``b`` in ``mode``, else text in ``encoding``)."""
    fd = open_fd(path, mode, root=root, cap=cap, perm=perm)
    py_mode = mode.replace("x", "w") if "b" in mode else mode.replace("t", "").replace("x", "w")
    try:
        if "b" in py_mode:
            return os.fdopen(fd, py_mode)
        return os.fdopen(fd, py_mode, encoding=encoding, errors="replace")
    except BaseException:
        os.close(fd)
        raise


def read_file(path: str | Path, cap: int, *, root: str | Path | None = None) -> bytes:
    """A whole regular file of at most ``cap`` bytes through the opener; :class:`TooLarge` over it (also when it
    grew since its size was read)."""
    with open_file(path, "rb", root=root, cap=cap) as f:
        data = f.read(cap + 1)
    if len(data) > cap:
        raise TooLarge(f"{path} is over the {_size(cap)} twinbench reads of such a file")
    return bytes(data)


def write_text(path: str | Path, data: bytes | str, *, root: str | Path | None = None) -> None:
    """Write ``data`` to the file ``path`` (created or truncated) through the opener: never through a link, never
    into a FIFO or a device. Whole files in a results folder go through :func:`write_file` instead."""
    blob = data.encode() if isinstance(data, str) else bytes(data)
    fd = open_fd(path, "w", root=root)
    try:
        write_all(fd, blob)
    finally:
        os.close(fd)


# ----------------------------------------------------------------------------------------------- the writer

def _is_link(dir_fd: int, name: str) -> str | None:
    """Where ``name`` (in the folder of ``dir_fd``) points when it is a symbolic link, else None."""
    try:
        return os.readlink(name, dir_fd=dir_fd)
    except OSError:
        return None


def _refuse(path: Path, target: str) -> LinkRefused:
    return LinkRefused(f"{path}: a symbolic link (to {terminal(target, 80)}); twinbench reads and writes nothing "
                       "through a link in a folder (remove the link, or choose another folder)")


def _parts(rel: str | Path) -> list[str]:
    parts = [p for p in Path(rel).parts if p not in ("", ".")]
    if any(p == ".." or os.sep in p for p in parts) or Path(rel).is_absolute():
        raise ValueError(f"{rel}: not a path inside its folder")
    return parts


@contextlib.contextmanager
def _folder(root: Path, parts: list[str], create: bool) -> Iterator[int]:
    """An fd of ``root/parts...``: each part below ``root`` created when ``create`` (``root`` too: the folder the
    user named, with its parents, as ``mkdir -p``), and never a link."""
    if create:
        Path(root).mkdir(parents=True, exist_ok=True)
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


def fresh_dir(path: str | Path) -> Path:
    """A new, empty folder at ``path`` (an absolute path with no links, as ``Path.resolve`` gives), or beside it
    (``path.1``, ``path.2``...) when ``path`` exists: every component opened without following a link from ``/``
    down, the last one made by this call. What a framework then writes into it by name (a profiler's trace)
    cannot be sent elsewhere by a link planted before (it is empty) or above it (each component was checked as
    it was opened), however many entries the folders around it hold."""
    path = Path(path)
    if not path.is_absolute():
        path = Path.cwd() / path
    parts = _parts(path.relative_to(path.anchor))
    with _folder(Path(path.anchor), parts[:-1], create=True) as fd:
        for n in range(1000):
            name = parts[-1] if n == 0 else f"{parts[-1]}.{n}"
            try:
                os.mkdir(name, 0o755, dir_fd=fd)
            except FileExistsError:
                continue
            return path.with_name(name)
    raise OSError(errno.EEXIST, "1000 folders of that name exist already", str(path))


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
    """An fd appending to ``path`` (created when missing) through the opener: a symbolic link, a FIFO, or a file
    with other hard links (an append would change the file they name) is refused in one line."""
    path = Path(path)
    fd = open_fd(path, "a+" if flags & os.O_RDWR else "a")
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
    """``path`` opened for reading through the opener: a regular file within ``cap`` (default
    :func:`max_file_bytes`), checked on the open file (a FIFO is never waited on)."""
    try:
        return open_file(path, "rb", cap=max_file_bytes() if cap is None else cap)  # type: ignore[no-any-return]
    except LinkRefused as e:  # a reader's callers take an OSError: the same one line
        raise OSError(str(e)) from None


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
_STORED = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
#: what breaks a line, for a terminal or a plot label: newline, carriage return, tab, NEL, line and paragraph
#: separators (a record's newline must never start a line of its own: a spoofed ``error:``)
_BREAKS = re.compile(r"[\n\r\t\x0b\x0c\x85\u2028\u2029]")


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
    s = one_line(s)
    return s if len(s) <= width else s[:width - 3] + "..."


def one_line(text: str) -> str:
    """``text`` as one line of its own characters: every line break (newline, carriage return, NEL, U+2028/9)
    and tab a space, every other control character and bidirectional mark or override removed. The one
    sanitizer of a string from data bound for the terminal, a plot label or the page."""
    return _STORED.sub("", _BREAKS.sub(" ", text))
