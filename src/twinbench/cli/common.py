"""What every command shares: the one typer ``app``, the consoles, the shared options and flags
(``with_spec_flags``, PRESET/TIMEOUT/TRACE/CACHE options), ``fail`` and the checks of where outputs go."""

from __future__ import annotations

import contextlib
import copy
import functools
import inspect
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console

from twinbench import runner
from twinbench.spec import (
    FLAG_HELP,
    OVERRIDABLE,
    PRESETS,
    SpecError,
    flag,
)


class App(typer.Typer):
    """The command line, whose output that cannot be written ends in one line: stdout on a full device (or a
    read error of the terminal) is exit 2 with one line on stderr, a closed pipe (``| head``) a quiet exit."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        import errno

        argv = kwargs.get("args")
        flag = empty_path(self, list(sys.argv[1:] if argv is None else argv))
        if flag:  # a shell's '' turns into Path('.') before any check could tell it from a folder named '.'
            sys.stderr.write(f"error: {flag}: an empty path; name a file or folder ('.' for this one)\n")
            raise SystemExit(2)
        try:
            return super().__call__(*args, **kwargs)
        except OSError as e:
            if e.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EPIPE):
                raise
            with contextlib.suppress(OSError):  # nothing more reaches the broken stdout, at exit neither
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            if e.errno == errno.EPIPE:
                raise SystemExit(141) from None
            with contextlib.suppress(OSError):
                sys.stderr.write(f"error: cannot write the output: {e.strerror or e}\n")
            raise SystemExit(2) from None


def empty_path(typer_app: typer.Typer, argv: list[str]) -> str:
    """The path option given an empty value in ``argv`` (``--out ''`` or ``--out=``), before a ``--`` (what follows
    is a script's own), or ''. The options are the ones declared with a path type, read off the command."""
    if "" not in argv and not any(t.startswith("--") and t.endswith("=") for t in argv):
        return ""  # no empty value at all: the command is not built a second time for every start
    command = typer.main.get_command(typer_app)
    commands = getattr(command, "commands", {})
    if argv and argv[0] in commands:
        command, argv = commands[argv[0]], argv[1:]
    paths = {o for p in command.params if _is_path(p) for o in p.opts}
    for i, token in enumerate(argv):
        if token == "--":
            break
        name, eq, value = token.partition("=")
        if name in paths and ((eq and not value) or (not eq and i + 1 < len(argv) and argv[i + 1] == "")):
            return name
    return ""


def _is_path(param: Any) -> bool:
    """A parameter declared as a path: its annotation (typer's own core) or its click type (typer on click)."""
    annotation = getattr(getattr(param, "type_descriptor", None), "annotation", None)
    if annotation is not None:
        return annotation is Path or Path in getattr(annotation, "__args__", ())
    return type(getattr(param, "type", None)).__name__ == "Path"


app = App(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
          help="Measure the same Transformer trained in PyTorch and JAX, honestly.")
console = Console(stderr=True)
#: a terminal's own width; elsewhere (a log, a pipe) 100 columns: tables fold their columns, notes wrap. --wide:
#: every table at its natural width
NARROW = 100


def _width() -> int | None:
    if sys.stdout.isatty():
        return None
    cols = os.environ.get("COLUMNS", "")
    return int(cols) if cols.isdigit() and int(cols) > 0 else NARROW


out = Console(width=_width())
#: lines saying where records that could not be written to results.jsonl were kept (runner.save_record)
UNSAVED: list[str] = []


def set_wide(wide: bool) -> None:
    """``--wide``: tables and notes at their full width, never folded."""
    if wide:
        out.width = 400


def check_json(json_path: Path | None, flag: str = "--json") -> None:
    """Fail before any work when ``json_path`` cannot be written (no such folder, a directory, read-only)."""
    if json_path is None:
        return
    parent = json_path.parent
    if json_path.is_dir():
        fail(f"{flag} {json_path}: a directory, not a file")
    if not parent.is_dir():
        fail(f"{flag} {json_path}: no folder {parent} (create it first)")
    from twinbench.folder_io import open_fd

    try:  # tried, not asked (os.access says yes to root on a read-only place)
        if json_path.exists() or json_path.is_symlink():
            os.close(open_fd(json_path.resolve(), "a"))  # through the opener: a FIFO is refused, never waited on
        else:
            probe = parent / f".twinbench-write-check-{os.getpid()}"
            probe.write_text("x")
            probe.unlink()
    except OSError as e:
        fail(f"{flag} {json_path}: cannot write there ({e.strerror or e})")


def check_dir(path: Path | str, flag: str) -> None:
    """Fail (one line, exit 2) before any work when ``path`` cannot be a folder written into: a file, a path
    under a file, a place it cannot be created in, read-only. It is created, as the command would, and a probe
    written and removed (so a read-only file system fails here even for root)."""
    p = Path(path).expanduser()
    if p.exists() and not p.is_dir():
        fail(f"{flag} {path}: a file, not a folder")
    try:
        p.mkdir(parents=True, exist_ok=True)
        probe = p / f".twinbench-write-check-{os.getpid()}"
        probe.write_text("x")
        probe.unlink()
    except OSError as e:
        fail(f"{flag} {path}: cannot write there ({e.strerror or e})")


def check_places(specs: list[Any], cache_flag: str = "--cache-dir") -> None:
    """Every folder the runs of ``specs`` will write into (the compilation cache root, --trace, --save-weights),
    checked before the first run: a measurement is never made only to lose its trace or fail its record."""
    from twinbench.compile_cache import default_root

    seen: set[tuple[str, str]] = set()
    default = str(default_root().expanduser().resolve())
    for s in specs:
        cache = f"{cache_flag} (default)" if s.host.cache_dir == default else cache_flag
        for flag_, value in ((cache, s.host.cache_dir), ("--trace", s.output.trace_dir), ("--save-weights", s.output.save_weights)):
            if value and (flag_, value) not in seen:
                seen.add((flag_, value))
                check_dir(value, flag_)


#: the longest --timeout taken: a week (a longer one overflows the clocks it is added to; use a week)
MAX_TIMEOUT = 7 * 24 * 3600.0


def check_timeout(timeout: float) -> None:
    if not timeout > 0:  # NaN too
        fail(f"--timeout must be a positive number of seconds, got {timeout:g}")
    if not timeout <= MAX_TIMEOUT:  # inf, 1e308: an OverflowError where it is added to a clock
        fail(f"--timeout {timeout:g}: at most {MAX_TIMEOUT:g} seconds (a week)")


def ready_outputs(target: Path, json_path: Path | None, timeout: float | None = None) -> None:
    """Every check of where results go, before anything runs: --out a writable directory, --json writable."""
    if timeout is not None:
        check_timeout(timeout)
    check_json(json_path)
    try:
        runner.check_out_dir(target)
    except SpecError as e:
        fail(str(e))


def write_text(path: Path, text: str, what: str, inside: Path | None = None) -> bool:
    """Write an output file; a failure is a warning (the records are already safe in results.jsonl). With
    ``inside`` (the results folder ``path`` is in) it is written by folder_io's writer: never through a link."""
    from twinbench import folder_io
    from twinbench.folder_io import write_file

    try:
        if inside is not None:
            write_file(inside, Path(path).relative_to(inside), text)
        else:
            folder_io.write_text(Path(path).resolve(), text)  # the one opener: never a FIFO or a device
        return True
    except (OSError, SpecError) as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else e
        console.print(f"[yellow]warning:[/] {what} not written to {path}: {why}", highlight=False)
        return False


def fail(message: str, code: int = 2) -> None:
    """One line on stderr, a non-zero exit: how every user error ends. The message is printed as written (its
    brackets are no markup: a shape ``[B, 1, 1, T]`` or ``jax[tpu]`` stays whole)."""
    from rich.markup import escape

    from twinbench.folder_io import one_line

    # one line of its own characters, whatever a file or a record put in it (a newline, an escape code)
    console.print(f"[bold red]error:[/] {escape(one_line(str(message)))}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def with_spec_flags(fn: Callable) -> Callable:
    """Add one option per RunSpec field declared as a flag (``--d-model`` for ``d_model``) to a command, its type
    and its help read off the field's declaration (``spec.OVERRIDABLE``, ``spec.FLAG_HELP``).

    The command receives them in ``**overrides`` (``None`` when not given), so every field of the spec is a
    flag without writing each one by hand in every command.
    """
    sig = inspect.signature(fn)
    params = [p for p in sig.parameters.values() if p.kind is not p.VAR_KEYWORD]
    for name, typ in OVERRIDABLE.items():
        if name in sig.parameters:  # the command's own option of that name serves the field too (explain's --steps)
            continue
        option = typer.Option(None, flag(name), help=FLAG_HELP[name],
                              rich_help_panel="Run spec (overrides the preset)")
        params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=option,
                                        annotation=Optional[typ]))  # noqa: UP045 (typer needs Optional)

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except SpecError as e:
            fail(str(e))

    wrapper.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
    return wrapper


#: The panels of ``--help`` beside typer's own "Options" (printed first: what to run or read) and the run spec's:
#: a reader meets the options of their question first and the rest grouped after it.
OWN_MODEL_PANEL = "Your own model"
MEASURE_PANEL = "Measurement"
OUTPUT_PANEL = "Output"
PLAN_PANEL = "Planning (runs nothing)"
TRACES_PANEL = "Reading traces (TRACE [TRACE]: profiles you already have)"
RUN_PANEL = "Running both sides now (framework:strategy, RESULTS_DIR:framework/strategy)"


def in_panel(option: Any, panel: str) -> Any:
    """A copy of a shared option declaration shown under another ``--help`` panel in one command."""
    moved = copy.copy(option)
    moved.rich_help_panel = panel
    return moved


#: ``--cache`` / ``--cache-dir`` for every command that runs specs: pass them through with_cache().
CACHE_OPTION = typer.Option("cold", "--cache", help="compilation cache state to measure: cold (fresh empty caches), "
                            "warm (a second process on a filled cache) or both (cold, then warm on the same cache)",
                            rich_help_panel=MEASURE_PANEL)
CACHE_DIR_OPTION = typer.Option(None, "--cache-dir", help="where compilation caches live (cold runs use fresh "
                                "subdirectories, removed after); default ~/.cache/twinbench/compile",
                                rich_help_panel=MEASURE_PANEL)


#: Options shared by every command that runs specs (compare, sweep, advise, claims).
PRESET_OPTION = typer.Option("small", help=f"model/training preset: {', '.join(PRESETS)}")
FRAMEWORK_OPTION = typer.Option("torch,jax", help="comma-separated: torch, jax")
TIMEOUT_OPTION = typer.Option(900.0, help="seconds before one run is stopped and marked failed",
                              rich_help_panel=MEASURE_PANEL)


#: ``--trace DIR`` for every command that runs specs (compare, sweep, claims): pass it through trace_dir().
TRACE_OPTION = typer.Option(
    None, "--trace", help="also record a few steady-state steps of each run with the framework's profiler "
                          "(after the measured steps, which stay unaffected) into this directory",
    rich_help_panel=MEASURE_PANEL)


def trace_dir(trace: Path | None) -> str:
    """The RunSpec field for ``--trace`` (an absolute path, as the worker may run elsewhere); "" without it."""
    return str(trace.resolve()) if trace else ""


def write_report(out_dir: Path, plan_steps: int) -> None:
    """report.html + report.md (+ plots/) into ``out_dir``; a failure to draw never loses the run."""
    from twinbench.report.page import write

    try:
        html_path, md_path, _ = write(out_dir, plan_steps)
    except Exception as e:
        console.print(f"[yellow]warning:[/] report not written: {type(e).__name__}: {e}", highlight=False)
        return
    out.print(f"  report: {html_path} (Markdown: {md_path.name})", highlight=False)

