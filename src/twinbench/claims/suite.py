"""Runs a selection of claims: the union of their runs (each in its own process, shared by run_id), the runs
of timed claims repeated and interleaved, their probes once (each in its own process), then every claim's
rule on its evidence.

The CLI (``twinbench claims``) runs each repeat of :func:`schedule` through ``runner.run_many`` (via
``cli.run_and_report``; repeat 1 into the results directory, repeat k into ``repeats/k/``), then calls
:func:`run_probes` and :func:`verdicts`, prints :func:`render` and writes :func:`write` (``claims.json``,
read by the report page).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from twinbench import backends, runner
from twinbench.claims import probes as probe_types
from twinbench.claims.core import (
    FAR_BEYOND,
    INCONCLUSIVE,
    NOT_MEASURABLE,
    Claim,
    Evidence,
    Setup,
    describe,
    judge_repeats,
)
from twinbench.claims.probes import Probe
from twinbench.claims.result import ClaimResult, Numbers
from twinbench.folder_io import check_inside, cut, make_dir, read_json, write_file
from twinbench.record import Record, typed
from twinbench.spec import RunSpec

if TYPE_CHECKING:
    from twinbench.load_meter import Reading

CLAIMS_JSON = "claims.json"
PROBES_DIR = "probes"
REPEATS_DIR = "repeats"  # repeats 2..N of the timed runs: repeats/2/results.jsonl, ...


#: Claims whose own runs an accelerator's suite runs last (a time-limited sitting loses them first).
LAST_ON_ACCELERATOR = ("C15", "C16")


def plan(claims: list[Claim], setup: Setup) -> tuple[dict[str, dict[str, RunSpec]], list[RunSpec]]:
    """Each claim's named runs, and the distinct specs to run (one per run_id, in first-use order)."""
    per_claim = {c.id: {} if c.unmeasurable(setup) else c.runs(setup) for c in claims}
    if setup.reason_traces and not setup.top.trace_dir:  # the runs whose traces explain reads (C22)
        traced = {c.id for c in claims if c.traced}
        per_claim = {cid: {n: s.evolve(trace_dir=setup.reason_traces) if cid in traced else s
                           for n, s in runs.items()} for cid, runs in per_claim.items()}
    unique: dict[str, RunSpec] = {}
    # on an accelerator a sitting can end before the suite does (--resume continues it): the input pipeline's
    # runs, which the hardware claims do not share, go last
    order = sorted(per_claim, key=lambda cid: setup.accelerator and cid in LAST_ON_ACCELERATOR)
    for runs in (per_claim[cid] for cid in order):
        for spec in runs.values():
            if spec.output.trace_dir or spec.run_id() not in unique:  # a traced use of a shared run wins (same run_id)
                unique[spec.run_id()] = spec
    return per_claim, list(unique.values())


def run_probes(claims: list[Claim], out_dir: Path, timeout: float,
               on_start: Any = lambda name: None) -> dict[str, Probe]:
    """Every probe the claims name, once, each in a fresh process (``python -m twinbench.claims.probes``).

    A probe already finished in ``out_dir/probes`` is reused (like ``--resume`` for runs).
    """
    results: dict[str, Probe] = {}
    make_dir(out_dir, PROBES_DIR)  # inside out_dir, never through a link (folder_io)
    for name in dict.fromkeys(p for c in claims for p in c.probes):
        path = out_dir / PROBES_DIR / f"{name}.json"
        check_inside(out_dir, f"{PROBES_DIR}/{name}.json")  # the probe's process writes it: never a link
        previous = _probe_result(name, path)
        if previous is not None and previous.status == "ok":
            results[name] = previous
            continue
        on_start(name)
        code, reason = runner.run_module("twinbench.claims.probes", [name, str(path)], timeout)
        found = _probe_result(name, path)
        if found is not None:
            results[name] = found
        else:
            results[name] = probe_types.failed(name, reason or f"probe exited with code {code}")
            write_file(out_dir, f"{PROBES_DIR}/{name}.json", msgspec.json.encode(results[name]))
    return results


def _probe_result(name: str, path: Path) -> Probe | None:
    """A probe's result as its file holds it, of the probe's type (bounded, read as data: folder_io), None when
    it has none or one of another shape (the probe then runs again)."""
    try:
        return probe_types.read(name, cut(read_json(path)))
    except (OSError, ValueError):  # msgspec.ValidationError is a ValueError
        return None


def schedule(claims: list[Claim], per_claim: dict[str, dict[str, RunSpec]], specs: list[RunSpec],
             repeats: int) -> list[list[RunSpec]]:
    """The specs of each repeat, in order: repeat 1 runs every spec, repeats 2..N again the runs of timed
    claims (but their ``once`` runs, which no rule reads), in the same order, so the timed runs are
    interleaved (A B C, A B C, A B C) and repeat k of every run sees about the same machine."""
    from twinbench.plan import repeat_rounds

    timed = {s.run_id() for c in claims if c.timed for n, s in per_claim[c.id].items() if n not in c.once}
    again = [s for s in specs if s.run_id() in timed]
    return [specs, *repeat_rounds(again, max(repeats, 1))[1:]] if again else [specs]


#: Seconds one run takes on an idle 2-core CPU, its fresh process (framework imports) included, by preset; the
#: budget of ``--quick`` (docs/claims.md shows the arithmetic). Presets not listed: a minute.
RUN_S = {"tiny": 6.0, "bert-tiny": 8.0, "small": 10.0}
#: What some runs add: a cold torch.compile, a JAX step recompiled for each new length (naive: per function;
#: jit: the whole step), a simulated device mesh, a torchrun launch, bf16 emulated on a CPU; plus the
#: simulated host work of --slow-input runs (steps x ms). naive+dynamic compiles each function once per shape, so
#: its compiles are the largest term of the run beyond the process (the measured CPU-seconds behind the figure:
#: benchmarks/results/how-long-does-the-claims-suite-take.md).
EXTRA_S = {"compile": 15.0, "jax:naive+dynamic": 30.0, "jax:jit+dynamic": 18.0, "devices": 2.0, "torchrun": 8.0,
           "cpu-bf16": 30.0}
PROBE_S = 8.0  # a probe: one process importing one or both frameworks


#: Of RUN_S, the one compile of a JAX step at these sizes (jit, naive's functions, scan), by preset; stated, a
#: share of the process's seconds, so the plan can say how much of a run is compiling.
JIT_S = {"tiny": 2.0, "bert-tiny": 3.0, "small": 4.0}


def compile_s(spec: RunSpec) -> float:
    """The compiling part of :func:`cost_s`: a cold torch.compile, a JAX step's one compile (JIT_S) and the
    recompiles a length policy makes (one per new length)."""
    c = 0.0
    if spec.strategy.base in ("compile", "compile-regional"):
        c += EXTRA_S["compile"] * (1 if spec.preset == "tiny" else 1.5)
    # an XLA framework's step is compiled at its first call (the backend says whether XLA runs it)
    if backends.get(spec.framework).READS_XLA_FLAGS and not spec.strategy.base.startswith("torchax"):
        c += JIT_S.get(spec.preset, 10.0)
    return c + EXTRA_S.get(f"{spec.framework}:{spec.strategy.base}+{spec.strategy.mods.length}", 0.0)


def load_factor(reading: Reading | None = None) -> tuple[float, str]:
    """How much longer the runs take at the load measured now than on an idle machine, and that load in words.

    Every run wants all the cores; with ``L`` runnable tasks of other processes on ``C`` cores it gets about
    ``C / (C + L)`` of them, so it takes ``(C + L) / C`` times as long (more where a framework's threads wait for
    each other, less where the others stop). ``L``: the 1-minute load average less what twinbench's own ended runs
    still add (load_meter.py). (1.0, "") when the OS does not say, or the others keep under a tenth of a core."""
    from twinbench.load_meter import LoadMeter

    r = reading if reading is not None else LoadMeter().now()
    others, cores = r.load_avg_1m_external, r.cpu_count
    if others is None or not cores or others < 0.1:
        return 1.0, ""
    return (cores + others) / cores, f"1-minute load {others:.2f} from other processes on {cores} core(s)"


def cost_s(spec: RunSpec) -> float:
    """The expected seconds of one run (see RUN_S): for the budget, never for a verdict."""
    from twinbench.strategies import registry

    t = RUN_S.get(spec.preset, 60.0)
    if spec.strategy.base in ("compile", "compile-regional"):
        t += EXTRA_S["compile"] * (1 if spec.preset == "tiny" else 1.5)
    t += EXTRA_S.get(f"{spec.framework}:{spec.strategy.base}+{spec.strategy.mods.length}", 0.0)  # a compile per length
    if spec.strategy.mods.bf16 and spec.preset not in ("tiny", "bert-tiny"):
        t += EXTRA_S["cpu-bf16"]  # an upper bound: on a GPU bf16 is cheaper, not dearer
    if spec.launch.devices > 1:
        t += EXTRA_S["devices"]
    if registry.get(spec.framework, spec.strategy.name).launcher == "torchrun":
        t += EXTRA_S["torchrun"]
    return t + spec.train.steps * spec.train.slow_input / 1e3


def estimate_s(rounds: list[list[RunSpec]], probes: int) -> float:
    """Expected wall time of a claims run: every run of every repeat, and the probes."""
    return sum(cost_s(s) for r in rounds for s in r) + probes * PROBE_S


def repeat_dir(out_dir: Path, k: int) -> Path:
    """Where repeat ``k`` (0-based) keeps its results.jsonl: the results directory itself for the first."""
    return out_dir if k == 0 else out_dir / REPEATS_DIR / str(k + 1)


def platforms_problem(setup: Setup, reps: list[dict[str, Record]]) -> str:
    """Why a claim's records cannot be judged together ("" when they can): records from two platforms, or
    from another platform than the one the suite planned for (a framework that missed the accelerator). No
    verdict is made of timings from two platforms."""
    where: dict[str, list[str]] = {}
    for rep in reps:
        for r in rep.values():
            if r.status == "ok" and r.conditions.platform:
                where.setdefault(str(r.conditions.platform), []).append(f"{r.run.framework}/{r.run.strategy}")
    if len(where) > 1:
        parts = "; ".join(f"{p}: {', '.join(dict.fromkeys(runs))}" for p, runs in where.items())
        return (f"not measurable here: the records come from {len(where)} platforms ({parts}), and no verdict is "
                "made of timings from two platforms")
    if where and setup.platform not in where:
        (p, runs), = where.items()
        return (f"not measurable here: planned for the {setup.platform.upper()}, but {', '.join(dict.fromkeys(runs))} "
                f"ran on the {p} (did a framework miss the {setup.platform.upper()}?)")
    return ""


def measured_at(runs: dict[str, RunSpec], records: dict[str, Record]) -> str:
    """The sizes a claim measured, in words: each distinct model and batch shape, its precision and attention,
    and the device the records name."""
    shapes = []
    for s in runs.values():
        m, t = s.model, s.train
        what = f"{s.preset} (L{m.layers} d{m.d_model}) {t.batch} x {t.seq}, {t.precision}"
        if s.strategy.attention_impl != "default":
            what += f", {s.strategy.attention_impl} attention"
        shapes.append(what)
    device = next((f"{r.run.device or r.conditions.platform} ({r.conditions.platform})" for r in records.values()
                   if r.status == "ok" and r.conditions.platform), "")
    return "; ".join(dict.fromkeys(shapes)) + (f" on {device}" if device and shapes else "")


def verdicts(claims: list[Claim], setup: Setup, per_claim: dict[str, dict[str, RunSpec]],
             records: list[list[Record]] | list[Record],
             probes: dict[str, Probe]) -> list[ClaimResult]:
    """Apply every claim's rule to its evidence (``records``: the records of each repeat, the first holding
    every run; a flat list is one repeat). Timed claims are judged on their repeats (core.judge_repeats).
    A failed run or probe gives ``not measurable`` with why; so do a rule that says it cannot measure, a claim
    this setup cannot run (``Claim.unmeasurable``) and records from two platforms (:func:`platforms_problem`).
    Every finding names the sizes it measured (``measured_at``)."""
    one = bool(records) and not isinstance(records[0], list)
    per_repeat = [records] if one else records or [[]]
    per_repeat = [typed(rep) for rep in per_repeat]  # type: ignore[arg-type]
    # a repeat's record is found by its configuration (config_id: the run_id of repeat 0)
    by_id = [{r.run.config_id or r.run.run_id: r for r in rep} for rep in per_repeat]  # type: ignore[union-attr]
    out = []
    for c in claims:
        runs = per_claim[c.id]
        missing = {"status": "failed", "error": "no record (the run did not happen)"}
        first = {n: by_id[0].get(s.run_id(), {**missing, "framework": s.framework, "strategy": s.strategy.name})
                 for n, s in runs.items()}
        reps = [first]
        for rep in by_id[1:] if c.timed else []:
            got = {n: rep[s.run_id()] for n, s in runs.items() if s.run_id() in rep}
            if got:
                reps.append(got)
        ev = Evidence(setup, first, {p: probes[p] if p in probes else probe_types.failed(p, "probe not run")
                                     for p in c.probes}, reps)
        problems = ev.problems()
        why_not = c.unmeasurable(setup)
        mixed = platforms_problem(setup, reps)
        numbers: Numbers = {}
        if why_not:
            v_word, finding, numbers, caveat = NOT_MEASURABLE, why_not, {}, ""
        elif problems:
            v_word, finding, numbers, caveat = NOT_MEASURABLE, "not measurable here: " + "; ".join(problems), {}, ""
        elif mixed:
            v_word, finding, numbers, caveat = NOT_MEASURABLE, mixed, {}, ""
        else:
            try:
                v = judge_repeats(c, ev)
                v_word, finding, numbers, caveat = v.verdict, v.finding, v.numbers, v.caveat
            except Exception as e:  # a rule that cannot read its evidence must not lose the other claims
                v_word, finding, numbers, caveat = (NOT_MEASURABLE, f"not measurable here: the rule could not be "
                                                    f"applied ({type(e).__name__}: {e})", {}, "")
        at = measured_at(runs, first)
        out.append(ClaimResult(
            claim=c.id, group=c.group, statement=c.statement, verdict=v_word,
            finding=f"{finding} [measured at {at}]" if at and not why_not else finding,
            measured_at=at, platform=setup.platform,
            rule=c.full_rule, numbers=numbers, runs=[s.run_id() for s in runs.values()],
            repeats=len(reps) if runs else 0,
            ran=[f"{n}: {describe(s)}" for n, s in runs.items()] + [f"probe {p}" for p in c.probes],
            caveat=" ".join(x for x in (caveat, c.caveat, ev.loaded() if c.timed else "") if x),
        ))
    return out


def write(results: list[ClaimResult], out_dir: Path, json_path: Path | None) -> Path:
    """``claims.json`` in the results directory (the report reads it), and ``--json FILE`` when given."""
    text = json.dumps(msgspec.to_builtins(results), indent=1)
    path = write_file(out_dir, CLAIMS_JSON, text)
    if json_path:
        from twinbench import folder_io

        folder_io.write_text(Path(json_path).resolve(), text)  # the one opener: never into a FIFO or a device
    return path


COLOURS = {"supported": "green", FAR_BEYOND: "blue", "contradicted": "red", "depends": "yellow", INCONCLUSIVE: "cyan",
           NOT_MEASURABLE: "magenta"}


def render(console: Any, results: list[ClaimResult]) -> None:
    """Per claim: the statement, what ran, the numbers, the verdict with its finding, the rule, the caveat."""
    from rich.markup import escape

    for r in results:
        colour = COLOURS.get(r.verdict, "white")
        console.print()
        console.print(f"[bold]{r.claim}[/] {escape(r.statement)}", soft_wrap=True)
        console.print(f"  [dim]ran:[/] {escape('; '.join(r.ran))}", soft_wrap=True)
        if r.numbers:
            nums = ", ".join(f"{k} = {v}" for k, v in r.numbers.items())
            console.print(f"  [dim]numbers:[/] {escape(nums)}", soft_wrap=True)
        console.print(f"  [bold {colour}]{r.verdict}[/]: {escape(r.finding)}", soft_wrap=True)
        console.print(f"  [dim]rule:[/] {escape(r.rule)}", soft_wrap=True)
        if r.caveat:
            console.print(f"  [dim]caveat:[/] {escape(r.caveat)}", soft_wrap=True)
    counts: dict[str, int] = {}
    for r in results:
        counts[r.verdict] = counts.get(r.verdict, 0) + 1
    console.print()
    noun = "verdict" if len(results) == 1 else "verdicts"
    console.print(f"claims: {len(results)} {noun}: " + ", ".join(f"{n} {v}" for v, n in counts.items()) + "  ("
                  + " ".join(f"{r.claim}={r.verdict}" for r in results) + ")", soft_wrap=True)
    for r in results:
        if r.verdict in (NOT_MEASURABLE, INCONCLUSIVE):
            console.print(f"  {r.claim} {r.verdict}: {escape(r.finding)}", soft_wrap=True)
