"""The one reader of the files a user names to ``explain`` (traces, compiled HLO text): one error path for all.

Every file is read through :func:`read_bytes`: a folder where a file is expected, a missing or unreadable file,
a device or FIFO, a corrupt or truncated gzip, and a file that inflates past :data:`MAX_BYTES` each end in one
:class:`TraceError` line naming the file and the reason, never a traceback and never an exhausted memory (the
gzip is inflated in bounded chunks and stopped at the cap). What a file *is* is decided by its content
(:func:`kind`: gzip's magic bytes, then JSON or not), never by its name alone or by the files beside it.
"""

from __future__ import annotations

import os
import zlib
from pathlib import Path

from twinbench.explain.steps import TraceError

#: the most bytes a trace (inflated) or an HLO text may hold; JSON parsing takes several times this in memory.
#: TWINBENCH_MAX_TRACE_MB overrides it.
MAX_BYTES = 2 * 2**30
GZIP_MAGIC = b"\x1f\x8b"
#: the head of a file :func:`kind` reads (inflated) to tell what it is
HEAD = 1 << 16
_CHUNK = 1 << 20


def max_bytes() -> int:
    """The cap on a file's (inflated) size: TWINBENCH_MAX_TRACE_MB, else :data:`MAX_BYTES` or a tenth of the
    memory available now, the smaller (parsing a JSON trace takes several times its size)."""
    mb = os.environ.get("TWINBENCH_MAX_TRACE_MB", "")
    if mb.isdigit() and int(mb) > 0:
        return int(mb) * 2**20
    from twinbench.measure.memory import host_available_bytes

    return max(min(MAX_BYTES, host_available_bytes() // 10), 64 * 2**20)


def _open_checked(path: str | Path, what: str) -> Path:
    p = Path(path)
    if p.is_dir():
        raise TraceError(f"{path}: a folder, not a {what} file")
    if not p.exists():
        raise TraceError(f"{path}: no such file")
    if not p.is_file():
        raise TraceError(f"{path}: not a regular file (a device or a pipe), not a {what}")
    return p


def _inflate(f: object, path: str | Path, limit: int, stop_at: int | None = None) -> bytes:
    """The gzip stream of the open file ``f`` inflated (every member), at most ``limit`` bytes; ``stop_at``: stop
    quietly once that many bytes are out (a head)."""
    out = bytearray()
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    cap = limit if stop_at is None else min(limit, stop_at)
    try:
        while chunk := f.read(_CHUNK):  # type: ignore[attr-defined]
            while chunk:
                if d.eof:  # a second gzip member follows (concatenated .gz files are one stream)
                    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
                out += d.decompress(chunk, cap + 1 - len(out))
                if len(out) > cap:
                    if stop_at is not None and stop_at <= limit:
                        return bytes(out[:stop_at])
                    raise TraceError(f"{path}: inflates past {limit / 2**20:.0f} MiB, the cap on a trace's size "
                                     "(TWINBENCH_MAX_TRACE_MB raises it): a gzip bomb, or trim the trace")
                chunk = d.unused_data if d.eof else d.unconsumed_tail
    except zlib.error as e:
        raise TraceError(f"{path}: a corrupt gzip file ({e})") from None
    if not d.eof and stop_at is None:
        raise TraceError(f"{path}: a truncated gzip file (it ends inside its compressed data)")
    return bytes(out)


def read_bytes(path: str | Path, what: str = "trace", limit: int | None = None) -> bytes:
    """The bytes of a user-named file, inflated when it is gzip (by content, whatever its name); one
    :class:`TraceError` line on any problem (see the module doc)."""
    limit = max_bytes() if limit is None else limit
    p = _open_checked(path, what)
    try:
        with p.open("rb") as f:
            magic = f.read(2)
            f.seek(0)
            if magic == GZIP_MAGIC:
                return _inflate(f, path, limit)
            if p.stat().st_size > limit:
                raise TraceError(f"{path}: {p.stat().st_size / 2**20:.0f} MiB, over the cap on a {what}'s size "
                                 f"({limit / 2**20:.0f} MiB; TWINBENCH_MAX_TRACE_MB raises it)")
            return f.read()
    except OSError as e:
        raise TraceError(f"{path}: cannot read it ({e.strerror or e})") from None


def read_text(path: str | Path, what: str) -> str:
    """A user-named text file (plain or gzip) as text; a binary file is one :class:`TraceError` line."""
    raw = read_bytes(path, what)
    try:
        return raw.decode()
    except UnicodeDecodeError:
        raise TraceError(f"{path}: not {what} (binary, not UTF-8 text)") from None


def head(path: str | Path) -> bytes:
    """The first :data:`HEAD` bytes of a file, inflated when it is gzip; b"" when it cannot be read."""
    try:
        p = _open_checked(path, "trace")
        with p.open("rb") as f:
            if f.read(2) == GZIP_MAGIC:
                f.seek(0)
                return _inflate(f, path, max_bytes(), stop_at=HEAD)
            f.seek(0)
            return f.read(HEAD)
    except (OSError, TraceError):
        return b""


#: strings only a torch.profiler (kineto) Chrome trace has
_TORCH = (b'"schemaVersion"', b'"cpu_op"', b'"user_annotation"', b'"python_function"', b'"Operator"',
          b'"cuda_runtime"', b'"kernel"', b'"deviceProperties"', b'"distributedInfo"')
#: strings of the Chrome export JAX's profiler writes beside its *.xplane.pb
_JAX_EXPORT = (b'"/host:', b'"/device:')


def kind(path: str | Path) -> str | None:
    """What a file is, by its content: ``chrome`` (a torch.profiler Chrome trace, or any JSON: its reader says
    when it is not one), ``jax-chrome`` (the Chrome export a JAX profile writes beside its ``*.xplane.pb``),
    ``xplane`` (not JSON, named ``*.xplane.pb[.gz]``: a protobuf has no magic bytes) or None."""
    h = head(path)
    body = h.removeprefix(b"\xef\xbb\xbf").lstrip()
    if body[:1] in (b"{", b"["):
        if not any(m in h for m in _TORCH) and any(m in h for m in _JAX_EXPORT):
            return "jax-chrome"
        return "chrome"
    if h and Path(path).name.endswith((".xplane.pb", ".xplane.pb.gz")):
        return "xplane"
    return None
