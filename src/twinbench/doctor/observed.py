"""What the script's process observes, declared once: the parts of the observations its instruments and
``summary`` build, as standard-library dataclasses.

Why dataclasses and not msgspec Structs: the script's process may run under another interpreter (``--python``),
where only twinbench's source is on the path and none of its dependencies, so what it builds must need nothing
outside the standard library. The doctor reads the same classes: msgspec decodes dataclasses (as fields of
:class:`twinbench.doctor.observations.Observations`, a Struct), so each part has one declaration. Every field
has a default, so an older doctor's observations (fewer keys) still load; a key a part does not declare is
ignored there (an older record's), and a misspelled one in the script's process is a ``TypeError`` or, as
``slots`` makes the classes, an ``AttributeError`` where it is written.

The script's process writes them with :func:`to_builtins` (``dataclasses.asdict``), as JSON.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

# -- what a run records as it goes ----------------------------------------------------------------------------


@dataclass(kw_only=True, slots=True)
class Note:
    """One note of ``Recorder.note`` (its kind is the key it is kept under: observations.NOTES)."""
    t: float = 0.0  # seconds since the recorder started
    step: int = 0  # the step calls made when it was noted
    message: str = ""  # cache_miss, recompile, graph_break: the framework's explanation
    nested: bool = False  # cache_miss: traced inside another function's trace (not a retrace of its own)
    fn: str = ""  # compile: the function compiled
    s: float = 0.0  # compile: its backend compile seconds


@dataclass(kw_only=True, slots=True)
class ScriptError:
    """How the script failed (``bootstrap.describe_error``): the exception, without the doctor's own frames."""
    type: str = ""
    module: str = ""
    message: str = ""
    traceback_tail: str = ""
    exit_code: int | str | None = None  # sys.exit's argument (anything but an int as its str)


# -- the doctor's own A/Bs and clocks (summary) ----------------------------------------------------------------


@dataclass(kw_only=True, slots=True)
class ReadCheck:
    """``summary.read_check``: the host-read check's A/B (reads waited for, against reads answered a step late)."""
    waited_n: int = 0
    waited_ms: float | None = None
    waited_iqr_ms: float | None = None
    deferred_n: int = 0
    deferred_ms: float | None = None
    deferred_iqr_ms: float | None = None


@dataclass(kw_only=True, slots=True)
class ThreadCheck:
    """``thread_check.summary``: cpu-oversubscribed's A/B, torch's intra-op threads as the script set them against
    the fix's count (the cores free when it began), on blocks of steps: as written, fixed, fixed, as written."""
    threads: int = 0  # torch's intra-op threads as the script set them
    fixed: int = 0  # the fix's count: torch.set_num_threads(fixed)
    cores: int = 0
    others_cores: float = 0.0  # cores other processes kept busy, from the run's start to the check's
    start: int = 0  # the step call the first block began at
    block: int = 0  # step calls a block
    blocks: int = 0  # blocks that ran to their end (4: complete)
    as_written_ms: list[float] = field(default_factory=list)  # each iteration kept (a block's first left out)
    fixed_ms: list[float] = field(default_factory=list)
    block_ms: list[float] = field(default_factory=list)  # each block's median, in order

    def figures(self) -> tuple[float, float, float] | None:
        """(as written, fixed: medians ms; the gain's spread: twice the standard error of the two medians' difference,
        a median's being about 0.93 IQR/sqrt(n)), or None with fewer than 2 iterations of a kind."""
        import math
        import statistics

        if min(len(self.as_written_ms), len(self.fixed_ms)) < 2:
            return None

        def se(x: list[float]) -> float:
            q = statistics.quantiles(x, n=4)
            return 0.93 * (q[2] - q[0]) / math.sqrt(len(x))

        return (statistics.median(self.as_written_ms), statistics.median(self.fixed_ms),
                2 * math.hypot(se(self.as_written_ms), se(self.fixed_ms)))


@dataclass(kw_only=True, slots=True)
class InputClock:
    """The input check on one clock (wall or CPU): the loop as written against the step on a pre-built batch."""
    loop_ms: float = 0.0  # the loop's steady iteration (median)
    loop_less_known_ms: float = 0.0  # ... less the host work the doctor names elsewhere
    prebuilt_ms: float = 0.0  # the step called on a batch already built (median)
    gain: float = 0.0  # (loop_less_known_ms - prebuilt_ms) / loop_ms
    loop_less_known_samples_ms: list[float] = field(default_factory=list)  # the one-sided test's samples
    prebuilt_samples_ms: list[float] = field(default_factory=list)
    block_ms: list[float] = field(default_factory=list)  # each block's median
    p: float | None = None  # the one-sided test's p, where a measurement carries it (findings/input.p_value)


@dataclass(kw_only=True, slots=True)
class InputCheck:
    """``summary.input_ab``: the input check's A/B, on the wall clock and on the process's CPU time."""
    blocks: int = 0
    replays: int = 0
    iterations: int = 0
    wall: InputClock | None = None
    cpu: InputClock | None = None


@dataclass(kw_only=True, slots=True)
class TraceTiming:
    """``summary.trace_timing``: ``--trace``'s steps with and without the profiler."""
    traced_step_ms: float | None = None  # median, one traced step's start to the next
    traced_steps: int = 0
    untraced_step_ms: float | None = None  # None: too few steps ran outside the trace to leave it out
    untraced_steps: int = 0
    untraced_spread: float | None = None  # 1.4826 MAD over the median of the untraced steps
    step_time_includes_trace: bool = False


# -- Recorder.info: what the instruments learnt about the script and its step ---------------------------------


@dataclass(kw_only=True, slots=True)
class Carried:
    """The state the step takes back from its previous call."""
    leaves: int = 0
    bytes: int = 0
    device_bytes: int | None = None  # the most held on one device


@dataclass(kw_only=True, slots=True)
class FreshArg:
    """One of the step's largest inputs that is not carried state (a batch), as the step's 3rd call saw it."""
    shape: list[int] = field(default_factory=list)
    bytes: int = 0
    kind: str = ""  # numpy | jax
    devices: int = 1
    replicated: bool = True
    sharding: str | None = None  # a jax.Array's sharding class


@dataclass(kw_only=True, slots=True)
class Memory:
    """``Compiled.memory_analysis()`` of the step, per device."""
    argument_size_in_bytes: int = 0
    output_size_in_bytes: int = 0
    alias_size_in_bytes: int = 0
    temp_size_in_bytes: int = 0


@dataclass(kw_only=True, slots=True)
class Attention:
    """``program.attention``: how the compiled step computes attention."""
    kind: str = ""  # fused | unfused
    calls: int = 0  # fused: the fused attention custom calls
    target: str = ""  # fused: the first one's target
    scores_shape: list[int] = field(default_factory=list)  # unfused: the largest score tensor
    dtype: str = ""
    scores_bytes: int = 0
    dot_product_attention: bool = False  # the script calls jax.nn.dot_product_attention
    causal: bool = False  # the scores are masked causally


@dataclass(kw_only=True, slots=True)
class Float64Arg:
    """One of the step's arguments holding float64 arrays (``program.float64_sources``)."""
    name: str = ""  # the step's parameter (or ``args[i]``)
    leaves: int = 0
    bytes: int = 0
    largest: str = ""  # its largest float64 leaf: path and shape, e.g. ``.params['Embed_0']['embedding'] f64[1000,32]``


@dataclass(kw_only=True, slots=True)
class Float64:
    """``program.float64`` (its compiled HLO) or ``float64_jaxpr``: the step's products (dots, convolutions) in float64,
    and where the float64 comes from (64-bit mode, the float64 arrays the step is given)."""
    dots: int = 0  # products computing in float64
    all_dots: int = 0  # every product of the step
    flops: float = 0.0  # the float64 ones' FLOPs (those the HLO sizes)
    all_flops: float = 0.0
    largest: str = ""  # the float64 product with the most FLOPs, as its HLO says it
    x64: bool = False  # jax_enable_x64 on when the run ended
    x64_line: str = ""  # file:line of the user's code that turns it on, where found
    args: list[Float64Arg] = field(default_factory=list)


@dataclass(kw_only=True, slots=True)
class StepProgram:
    """The step's program read back from JAX's caches (``instruments_jax.facts``)."""
    eqns: int = 0
    backend: str = "?"
    repeat: dict[str, int] | None = None  # program.find_repeat
    compile_s: float = 0.0
    attention: Attention | None = None
    attention_skipped: str | None = None
    float64: Float64 | None = None  # products computing in float64 (findings/precision.py)
    read_s: float | None = None


@dataclass(kw_only=True, slots=True)
class H2D:
    """The host-to-device copy measured after the run."""
    bytes_per_s: float | None = None
    latency_s: float = 0.0


@dataclass(kw_only=True, slots=True)
class EagerFunction:
    """A user function an eager step runs (``instruments_jax.eager_step``), and the arguments jit needs static."""
    name: str = ""
    file: str = ""
    line: int = 0
    params: list[str] = field(default_factory=list)
    static: dict[str, str] = field(default_factory=dict)  # argument -> why it must be static
    nnx: bool = False  # given NNX modules: nnx.jit


@dataclass(kw_only=True, slots=True)
class EagerWork:
    """``eager_step.EagerStep.describe``: the functions to jit, whether the loop itself calls them, where the work ran."""
    functions: list[EagerFunction] = field(default_factory=list)
    loop: bool = False
    at: str = ""


@dataclass(kw_only=True, slots=True)
class TraceInfo:
    """``--trace``: what the profiler recorded (``trace.StepProfiler``; also ``DIR/trace.json``'s first keys)."""
    framework: str = ""
    steps: list[int] = field(default_factory=list)  # the step calls recorded
    files: list[str] = field(default_factory=list)
    hlo: str | None = None  # XLA's dump folder
    dir: str = ""
    timing_error: str | None = None  # trace.write_timing could not add the step times


@dataclass(kw_only=True, slots=True)
class Info:
    """``Recorder.info``: the static facts the instruments add as the script runs and at its end."""
    threads: dict[str, int] = field(default_factory=dict)  # framework -> its threads
    backend: str | None = None
    devices: int = 1
    step_def: str | None = None  # the step's key: kind:file:line:name
    carried: Carried = field(default_factory=Carried)
    carried_args: list[str] = field(default_factory=list)
    # the jit's options as the script gave them (those printable as code): free-form, whatever jax.jit takes
    jit_options: dict[str, Any] = field(default_factory=dict)
    jit_kind: str | None = None
    fresh_args: list[FreshArg] = field(default_factory=list)
    donated_bytes: int | None = None
    memory: Memory | None = None
    memory_capacity_bytes: int | None = None
    donation_skipped: str | None = None
    donation_error: str | None = None
    step_program: StepProgram | None = None
    skipped: dict[str, str] = field(default_factory=dict)  # a check skipped -> why
    h2d: H2D | None = None
    eager_sources: dict[str, int] = field(default_factory=dict)
    eager_step: EagerWork | None = None
    jax_host_read_sites: dict[str, int] = field(default_factory=dict)
    torch_host_read_sites: dict[str, int] = field(default_factory=dict)
    torch_loader_read_sites: dict[str, int] = field(default_factory=dict)
    torch_optimizers: dict[str, str] = field(default_factory=dict)  # its step's key -> the optimizer's class
    torch_param_bytes: dict[str, dict[str, int]] = field(default_factory=dict)  # its key -> dtype -> its params' bytes
    torch_float64_line: str = ""  # where float64 parameters: the script's line that makes them, where found
    torch_graphs: int | None = None
    torch_graph_break_counts: dict[str, int] = field(default_factory=dict)
    cuda: str | bool = False  # the CUDA device's name
    nnx_node_args: list[str] | None = None
    nnx_graph_leaves: int | None = None
    child_processes: dict[str, int] = field(default_factory=dict)  # module:function -> processes started
    input_check_error: str | None = None
    trace: TraceInfo | None = None
    trace_error: str | None = None
    instrument_errors: list[str] = field(default_factory=list)
    finalize_errors: list[str] = field(default_factory=list)
    snapshot_error: str | None = None
    drain_error: str | None = None


def to_builtins(value: object) -> object:
    """``json.dump``'s ``default`` for these classes: a dataclass as its fields (anything else as its ``str``)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return str(value)
