"""Where a sweep's records are kept: the results directory, checked before any run starts, locked while runs
append to it, and each record appended to ``results.jsonl`` the moment its run ends (or kept elsewhere, with a
line saying where, when it cannot be). The runner (``runner.run_many``) schedules the runs; this keeps them.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from twinbench.folder_io import (
    LinkRefused,
    NotRegular,
    check_folder,
    check_readable,
    lines,
    open_append,
    open_fd,
    terminal,
    write_all,
)
from twinbench.record import Record, RecordWriteError, append_jsonl
from twinbench.spec import SpecError

RESULTS = "results.jsonl"
LOCK = ".twinbench.lock"
#: where a record that could not be appended to results.jsonl is kept first (record.keep_unsaved), beside it
UNSAVED = RESULTS + ".unsaved.jsonl"


def check_out_dir(out_dir: Path) -> None:
    """Fail (SpecError, one line) before any run when ``out_dir`` is a file, cannot be created or written, its
    ``results.jsonl`` cannot be appended to or is over the reader's cap, or it holds a symbolic link
    (folder_io.check_folder): a measurement is never made only to be lost, nor written outside ``out_dir``."""
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise SpecError(f"--out {out_dir}: a file, not a directory")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise SpecError(f"--out {out_dir}: cannot create it ({e.strerror or e})") from None
    path = out_dir / RESULTS
    check_folder(out_dir)  # a link twinbench could write through: refused now, not after the runs
    if path.exists() and not path.is_file():
        raise SpecError(f"--out {out_dir}: its {RESULTS} is not a file")
    if path.exists():
        try:
            check_readable(path)
        except OSError as e:
            raise SpecError(f"--out {out_dir}: {e}") from None
    holder = lock_holder(out_dir)
    if holder is not None:  # nothing (settings, a probe's output) is written into a folder another run holds
        raise SpecError(busy(out_dir, holder))
    probe = out_dir / f".twinbench-write-check-{os.getpid()}"
    try:
        with contextlib.suppress(FileNotFoundError):  # one a crashed twinbench of this pid left (never followed)
            probe.unlink()
        os.close(open_fd(probe, "x", perm=0o600))
        probe.unlink()
        if path.exists():
            os.close(open_append(path))
    except OSError as e:
        with contextlib.suppress(OSError):
            probe.unlink()
        raise SpecError(f"--out {out_dir}: cannot write there ({e.strerror or e})") from None


def busy(out_dir: Path, holder: str) -> str:
    """The line for a results folder another twinbench holds the lock of (``holder``: what its lock file says)."""
    return (f"--out {out_dir}: another twinbench (pid {terminal(holder, 20)}) is writing there now; wait for it to end "
            "or choose another --out")


def lock_holder(out_dir: Path) -> str | None:
    """Who holds ``out_dir``'s lock now (its lock file's pid, "?" if it says none), or None when no one does: the
    lock is tried and let go at once. Opened through the opener: a lock that is a link or not a regular file (a
    FIFO, which a blocking open would wait on forever) is a SpecError naming it."""
    import fcntl

    try:
        fd = open_fd(Path(out_dir) / LOCK, "r")
    except (LinkRefused, NotRegular) as e:
        raise SpecError(_bad_lock(out_dir, e)) from None
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return None  # closing the descriptor lets it go
    except OSError:
        return os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
    finally:
        os.close(fd)


def _bad_lock(out_dir: Path, e: OSError | SpecError) -> str:
    if isinstance(e, LinkRefused):
        return str(e)
    return (f"--out {out_dir}: its {LOCK} is {e.strerror or e}; twinbench locks only a file it made (remove it, "
            "or choose another --out)")


@contextlib.contextmanager
def out_lock(out_dir: Path) -> Iterator[None]:
    """Hold ``out_dir``'s lock while runs append to it: a second twinbench writing the same results directory at
    the same time (which would run the same configurations twice and split the summary) fails at once."""
    import fcntl

    try:
        fd = open_fd(Path(out_dir) / LOCK, "a+")  # never through a link, never a FIFO
    except (LinkRefused, NotRegular) as e:
        raise SpecError(_bad_lock(out_dir, e)) from None
    except OSError:  # a read-only place was refused by check_out_dir already; nothing to lock here
        yield
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise SpecError(busy(out_dir, os.pread(fd, 64, 0).decode(errors="replace").strip() or "?")) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        if line := recover_unsaved(Path(out_dir)):
            print(f"note: {line}", file=sys.stderr)
        yield
    finally:
        os.close(fd)


def recover_unsaved(out_dir: Path) -> str:
    """Append back to ``results.jsonl`` the records a failed append kept beside it (:data:`UNSAVED`, a full disk
    say), under the lock: a ``--resume`` then counts them done instead of running them again, and the folder holds
    them where every reader looks. A torn line (the disk filled during that write too) is left out; the side file
    is removed once its records are in. Idempotent: records already at the end of ``results.jsonl`` (an earlier
    recovery stopped before the removal) are not appended twice. A line saying what was done ('' for nothing)."""
    side, path = out_dir / UNSAVED, out_dir / RESULTS
    good, torn = [], 0
    try:
        for _, line in lines(side):
            if line is None or not line.strip():
                torn += line is None
                continue
            try:
                whole = line.endswith(b"\n") and isinstance(json.loads(line), dict)
            except (ValueError, RecursionError):
                whole = False
            if whole:
                good.append(line)
            else:
                torn += 1
    except FileNotFoundError:
        return ""
    except (OSError, SpecError) as e:  # a link, a FIFO, over the cap: left alone, said once
        return f"{side} left as it is ({e})"
    blob = b"".join(good)
    if blob:
        try:
            fd = open_append(path)
        except (OSError, SpecError) as e:
            return f"{len(good)} record(s) kept in {side} could not be appended to {path} ({e}); they stay there"
        try:
            size = os.fstat(fd).st_size
            if size < len(blob) or os.pread(fd, len(blob), size - len(blob)) != blob:
                try:
                    newline = b"\n" if size and os.pread(fd, 1, size - 1) != b"\n" else b""
                    write_all(fd, newline + blob)
                    os.fsync(fd)
                except OSError as e:
                    with contextlib.suppress(OSError):
                        os.ftruncate(fd, size)  # no torn line in results.jsonl; the side file stays whole
                    return (f"{len(good)} record(s) kept in {side} could not be appended to {path} "
                            f"({e.strerror or e}); they stay there")
        finally:
            os.close(fd)
    with contextlib.suppress(OSError):
        side.unlink()
    left = f"; {torn} torn line(s) left out" if torn else ""
    return f"{len(good)} record(s) a full disk had kept in {side} appended to {path}{left}"


def save_record(path: Path, record: Record, notes: list[str] | None) -> None:
    """Append ``record`` to ``path``; when that fails, keep it elsewhere and add a line saying where to ``notes``
    (the runs go on: the next record may fit, and each one that does not is kept too)."""
    try:
        append_jsonl(path, record.to_dict())
    except RecordWriteError as e:
        line = str(e)
        if e.kept is not None:
            line += f" (append it back with `cat {e.kept} >> {path}`)"
        if notes is not None:
            notes.append(line)
        print(f"warning: {line}", file=sys.stderr)

