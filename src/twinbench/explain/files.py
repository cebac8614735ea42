"""The one reader of the files a user names to ``explain`` (traces, compiled HLO text): one error path for all.

Every file is read through :func:`read_bytes`: a folder where a file is expected, a missing or unreadable file,
a device or FIFO, a corrupt or truncated gzip, and a file that inflates past :data:`MAX_BYTES` each end in one
:class:`TraceError` line naming the file and the reason, never a traceback and never an exhausted memory (the
gzip is inflated in bounded chunks and stopped at the cap). What a file *is* is decided by its content
(:func:`kind`: gzip's magic bytes, then JSON or not), never by its name alone or by the files beside it.

A trace is never held whole: :func:`stream` hands its reader the inflated bytes chunk by chunk (the streaming
JSON parser keeps only the event it is on; an xplane is inflated to a temporary file and walked a field at a
time), so its cap (:func:`max_stream_bytes`) bounds the time a read takes, not its memory. Whatever is parsed
whole (HLO text) is held in memory, several times its size once decoded: its cap (:func:`max_bytes`,
:data:`HLO_MAX_BYTES`) bounds that memory.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from twinbench.explain.steps import TraceError

#: the most bytes a file read whole may hold (inflated); decoding it takes several times this in memory.
#: TWINBENCH_MAX_TRACE_MB overrides it.
MAX_BYTES = 2 * 2**30
#: the most bytes a streamed trace (Chrome JSON, xplane) may inflate to: a bound on the time its read takes (its
#: memory does not grow with it). TWINBENCH_MAX_TRACE_MB overrides it.
MAX_STREAM_BYTES = 64 * 2**30
#: the most bytes of compiled HLO text read: it is parsed whole, into several times its size (every instruction,
#: and again for FLOPs). TWINBENCH_MAX_HLO_MB overrides it.
HLO_MAX_BYTES = 64 * 2**20
GZIP_MAGIC = b"\x1f\x8b"
#: a gzip that inflates to more than this many times its compressed bytes (past :data:`RATIO_FROM`) is no
#: profiler's: traces compress 5-30 times; a run of zeros, 1000 times. TWINBENCH_MAX_GZIP_RATIO sets it.
MAX_RATIO = 200
#: bytes a gzip may inflate to before its ratio is judged (a small file's header compresses well)
RATIO_FROM = 16 * 2**20
#: seconds a trace's inflation may take (a bound on time, whatever the caps on size): TWINBENCH_MAX_TRACE_S
MAX_SECONDS = 600.0
#: the head of a file :func:`kind` reads (inflated) to tell what it is
HEAD = 1 << 16
_CHUNK = 1 << 20
#: the read size a streaming JSON parser asks for: a token longer than one read is re-scanned from its start on
#: each read (yajl), so larger reads keep a long string's cost near its length
JSON_READ = 1 << 22
#: the longest JSON token (a string, a number) a streamed trace may hold: no profiler writes a name or an
#: argument this long, and the parser holds a token whole (twice) while it is read
MAX_TOKEN = 32 * 2**20
#: a JSON string's closing (or opening) quote: one no backslash escapes. A quote after an escaped backslash
#: (``\\"``) is taken for an escaped one: a token looks longer than it is, never shorter.
_QUOTE = re.compile(rb'(?<!\\)"')
_QUOTE_REVERSED = re.compile(rb'"(?!\\)')


def max_bytes() -> int:
    """The cap on the (inflated) size of a file read whole: TWINBENCH_MAX_TRACE_MB, else
    :data:`MAX_BYTES` or a tenth of the memory available now, the smaller (decoding it takes several times its
    size)."""
    given = _mib("TWINBENCH_MAX_TRACE_MB")
    if given is not None:
        return given
    from twinbench.measure.memory import host_available_bytes

    return max(min(MAX_BYTES, host_available_bytes() // 10), 64 * 2**20)


def max_stream_bytes() -> int:
    """The cap on a streamed trace's inflated size: TWINBENCH_MAX_TRACE_MB, else :data:`MAX_STREAM_BYTES`."""
    given = _mib("TWINBENCH_MAX_TRACE_MB")
    return MAX_STREAM_BYTES if given is None else given


def max_hlo_bytes() -> int:
    """The cap on an HLO text's size: TWINBENCH_MAX_HLO_MB, else :data:`HLO_MAX_BYTES` or a tenth of the memory
    available now, the smaller (its instructions parsed take several times the text)."""
    given = _mib("TWINBENCH_MAX_HLO_MB")
    if given is not None:
        return given
    from twinbench.measure.memory import host_available_bytes

    return max(min(HLO_MAX_BYTES, host_available_bytes() // 10), 16 * 2**20)


def _mib(env: str) -> int | None:
    """A cap in bytes the environment variable ``env`` sets in MiB (a positive whole number), None otherwise."""
    mb = os.environ.get(env, "")
    return int(mb) * 2**20 if mb.isdigit() and int(mb) > 0 else None


def _bound(env: str, default: float) -> float:
    raw = os.environ.get(env, "")
    try:
        v = float(raw)
    except ValueError:
        return default
    return v if 0 < v < float("inf") else default


class Inflation:
    """The bounds of one gzip's inflation besides its size: the ratio of bytes out to bytes in (past
    :data:`RATIO_FROM`) and the seconds it takes; a :class:`TraceError` line naming the file past either."""

    def __init__(self, path: str | Path) -> None:
        self.path, self.ratio = path, _bound("TWINBENCH_MAX_GZIP_RATIO", MAX_RATIO)
        self.deadline = time.monotonic() + _bound("TWINBENCH_MAX_TRACE_S", MAX_SECONDS)
        self.inp = 0

    def check(self, out: int) -> None:
        if out > RATIO_FROM and out > self.ratio * max(self.inp, 1):
            raise TraceError(f"{self.path}: inflates to over {self.ratio:g} times its compressed size (no "
                             "profiler's trace does; a gzip bomb; TWINBENCH_MAX_GZIP_RATIO raises it)")
        if time.monotonic() > self.deadline:
            raise TraceError(f"{self.path}: still inflating after {_bound('TWINBENCH_MAX_TRACE_S', MAX_SECONDS):g}"
                             " s, the bound on a trace's read (TWINBENCH_MAX_TRACE_S raises it)")


def _open_checked(path: str | Path, what: str) -> Path:
    p = Path(path)
    if p.is_dir():
        raise TraceError(f"{path}: a folder, not a {what} file")
    if not p.exists():
        raise TraceError(f"{path}: no such file")
    if not p.is_file():
        raise TraceError(f"{path}: not a regular file (a device or a pipe), not a {what}")
    return p


def _open(p: Path, what: str) -> Any:
    """``p`` opened through folder_io's one opener (a FIFO swapped in after :func:`_open_checked` is refused,
    never waited on); the path the user named is resolved once, as named."""
    from twinbench.folder_io import NotRegular, open_file

    try:
        return open_file(p.resolve(), "rb")
    except NotRegular as e:
        raise TraceError(f"{p}: {e.strerror}, not a {what}") from None


def _inflate(f: object, path: str | Path, limit: int, stop_at: int | None = None,
             env: str = "TWINBENCH_MAX_TRACE_MB") -> bytes:
    """The gzip stream of the open file ``f`` inflated (every member), at most ``limit`` bytes; ``stop_at``: stop
    quietly once that many bytes are out (a head)."""
    out = bytearray()
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    cap = limit if stop_at is None else min(limit, stop_at)
    bound = Inflation(path)
    try:
        while chunk := f.read(_CHUNK):  # type: ignore[attr-defined]
            bound.inp += len(chunk)
            while chunk:
                bound.check(len(out))
                if d.eof:  # a second gzip member follows (concatenated .gz files are one stream)
                    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
                out += d.decompress(chunk, cap + 1 - len(out))
                if len(out) > cap:
                    if stop_at is not None and stop_at <= limit:
                        return bytes(out[:stop_at])
                    raise TraceError(f"{path}: inflates past {limit / 2**20:.0f} MiB, the cap on a trace's size "
                                     f"({env} raises it): a gzip bomb, or trim the trace")
                chunk = d.unused_data if d.eof else d.unconsumed_tail
    except zlib.error as e:
        raise TraceError(f"{path}: a corrupt gzip file ({e})") from None
    if not d.eof and stop_at is None:
        raise TraceError(f"{path}: a truncated gzip file (it ends inside its compressed data)")
    return bytes(out)


def read_bytes(path: str | Path, what: str = "trace", limit: int | None = None,
               env: str = "TWINBENCH_MAX_TRACE_MB") -> bytes:
    """The bytes of a user-named file, inflated when it is gzip (by content, whatever its name); one
    :class:`TraceError` line on any problem (see the module doc)."""
    limit = max_bytes() if limit is None else limit
    p = _open_checked(path, what)
    try:
        with _open(p, what) as f:
            magic = f.read(2)
            f.seek(0)
            if magic == GZIP_MAGIC:
                return _inflate(f, path, limit, env=env)
            if p.stat().st_size > limit:
                raise TraceError(f"{path}: {p.stat().st_size / 2**20:.0f} MiB, over the cap on a {what}'s size "
                                 f"({limit / 2**20:.0f} MiB; {env} raises it)")
            return f.read()
    except OSError as e:
        raise TraceError(f"{path}: cannot read it ({e.strerror or e})") from None


class Stream:
    """The inflated bytes of an open file, read in chunks (``read(n)``, as a streaming parser asks): gzip (every
    member) by content, stopped at ``limit`` bytes out; a corrupt or truncated gzip and the cap are one
    :class:`TraceError` line naming the file."""

    def __init__(self, f: Any, path: str | Path, limit: int, gz: bool, json_tokens: bool = False) -> None:
        self._f, self._path, self._limit, self.gzip = f, path, limit, gz
        self._d = zlib.decompressobj(16 + zlib.MAX_WBITS) if gz else None
        self._pending = b""  # compressed bytes not yet inflated (the decompressor's unconsumed tail)
        self.out = 0  # bytes handed out so far
        #: JSON: the bytes since the last quote (:data:`_QUOTE`), checked against :data:`MAX_TOKEN`; None: not JSON
        self._run: int | None = 0 if json_tokens else None
        self._last = b""  # the last byte handed out (a quote at a chunk's start may be escaped by it)
        self._bound = Inflation(path) if gz else None

    def read(self, n: int = _CHUNK) -> bytes:
        if n == 0:  # a parser's probe of what the stream yields (bytes or text): nothing is consumed
            return b""
        n = _CHUNK if n < 0 else n
        chunk = self._f.read(n) if self._d is None else self._inflate(n)
        self.out += len(chunk)
        if self._bound is not None:
            self._bound.check(self.out)
        if self.out > self._limit:
            raise TraceError(f"{self._path}: inflates past {self._limit / 2**20:.0f} MiB, the cap on a trace's "
                             "size (TWINBENCH_MAX_TRACE_MB raises it): a gzip bomb, or trim the trace")
        if self._run is not None and chunk:
            self._tokens(chunk)
        return chunk

    def _tokens(self, chunk: bytes) -> None:
        """Count the bytes since the last quote through ``chunk``: a run past :data:`MAX_TOKEN` is a string or
        number no trace holds, refused in one line before the parser holds it whole (and re-scans it). A run
        inside a chunk is shorter than the chunk; only runs across chunks are counted."""
        run, seen = self._run or 0, self._last + chunk
        start = self.out - len(chunk) - run  # where the run began
        first = _QUOTE.search(seen)
        long = run + len(chunk) if first is None else run + first.start() - len(self._last)
        if long > MAX_TOKEN:
            raise TraceError(f"{self._path}: holds a string or number over {MAX_TOKEN // 2**20} MiB long, at byte "
                             f"{start:,} (no profiler writes one): not a trace explain reads")
        last = _QUOTE_REVERSED.search(seen[::-1]) if first is not None else None
        self._run = long if last is None else last.start()
        self._last = chunk[-1:]

    def _count(self, compressed: bytes) -> None:
        if self._bound is not None:
            self._bound.inp += len(compressed)

    def _inflate(self, n: int) -> bytes:
        d = self._d
        assert d is not None
        try:
            while True:
                if d.eof:  # a second gzip member follows (concatenated .gz files are one stream)
                    rest = d.unused_data + self._pending
                    if not rest:
                        rest = self._f.read(_CHUNK)
                        if not rest:
                            return b""
                        self._count(rest)
                    self._d = d = zlib.decompressobj(16 + zlib.MAX_WBITS)
                    self._pending = rest
                if not self._pending:
                    self._pending = self._f.read(_CHUNK)
                    self._count(self._pending)
                    if not self._pending:
                        raise TraceError(f"{self._path}: a truncated gzip file (it ends inside its compressed data)")
                out = d.decompress(self._pending, n)
                self._pending = d.unconsumed_tail if not d.eof else b""
                if out:
                    return out
        except zlib.error as e:
            raise TraceError(f"{self._path}: a corrupt gzip file ({e})") from None


@contextlib.contextmanager
def stream(path: str | Path, what: str = "trace", limit: int | None = None, json_tokens: bool = False
           ) -> Iterator[Stream]:
    """A user-named file opened for streaming (plain or gzip, by content): its checks and errors are
    :func:`read_bytes`'s, its cap :func:`max_stream_bytes` (the time a read takes, not its memory); with
    ``json_tokens``, a JSON token over :data:`MAX_TOKEN` too (what a streaming parser would hold whole)."""
    limit = max_stream_bytes() if limit is None else limit
    p = _open_checked(path, what)
    try:
        with _open(p, what) as f:
            gz = f.read(2) == GZIP_MAGIC
            f.seek(0)
            if not gz and p.stat().st_size > limit:
                raise TraceError(f"{path}: {p.stat().st_size / 2**20:.0f} MiB, over the cap on a {what}'s size "
                                 f"({limit / 2**20:.0f} MiB; TWINBENCH_MAX_TRACE_MB raises it)")
            yield Stream(f, path, limit, gz, json_tokens)
    except OSError as e:
        raise TraceError(f"{path}: cannot read it ({e.strerror or e})") from None


def check_readable(path: str | Path, what: str = "trace") -> None:
    """Read a user-named file through to its end without keeping it: one :class:`TraceError` line when it is
    unreadable, a corrupt or truncated gzip, or over the cap."""
    with stream(path, what) as s:
        if not s.gzip:  # a plain file has nothing to inflate: opening it is the check
            return
        while s.read(_CHUNK):
            pass


def check_hlo_size(path: str | Path) -> None:
    """A compiled HLO text a user names, refused from its size alone when it is plain text over
    :func:`max_hlo_bytes` (before any trace is read; a gzip is stopped at the cap where it is read)."""
    p = _open_checked(path, "compiled HLO text")
    try:
        with _open(p, "compiled HLO text") as f:
            if f.read(2) == GZIP_MAGIC:
                return
            size, limit = os.fstat(f.fileno()).st_size, max_hlo_bytes()
    except OSError as e:
        raise TraceError(f"{path}: cannot read it ({e.strerror or e})") from None
    if size > limit:
        raise TraceError(f"{path}: {size / 2**20:.0f} MiB, over the cap on a HLO text's size ({limit / 2**20:.0f} "
                         "MiB; TWINBENCH_MAX_HLO_MB raises it)")


def read_text(path: str | Path, what: str) -> str:
    """A user-named text file (plain or gzip) as text; a binary file is one :class:`TraceError` line. HLO text
    is capped at :func:`max_hlo_bytes` (parsed whole: its memory grows with it)."""
    hlo = "HLO" in what
    raw = read_bytes(path, what, limit=max_hlo_bytes() if hlo else None,
                     env="TWINBENCH_MAX_HLO_MB" if hlo else "TWINBENCH_MAX_TRACE_MB")
    try:
        return raw.decode()
    except UnicodeDecodeError:
        raise TraceError(f"{path}: not {what} (binary, not UTF-8 text)") from None


def head(path: str | Path) -> bytes:
    """The first :data:`HEAD` bytes of a file, inflated when it is gzip; b"" when it cannot be read."""
    try:
        p = _open_checked(path, "trace")
        with _open(p, "trace") as f:
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
