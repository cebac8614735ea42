"""What is wrong, from the observations: one small function per finding id, each next to its threshold.

The ids are a contract (JSON output, docs/doctor.md, tests). Every function takes the observations dict
(``Recorder.observations()``) and returns a :class:`Finding` or ``None``. Rates are per *steady* step:
counted between the start of step 2 and the start of the last step, so step 1 (compilation) and whatever
runs after the loop (evaluation, saving) do not count.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

SEVERITIES = ("error", "warning", "info")  # "warning or worse" decides the exit code
MIN_STEADY_STEPS = 2  # per-step findings need at least this many steady steps to say anything

JAX_DOCS = "https://docs.jax.dev/en/latest"
TORCH_DOCS = "https://docs.pytorch.org/docs/stable"


@dataclass
class Finding:
    id: str
    severity: str  # error | warning | info
    title: str  # one line
    evidence: str  # the numbers behind it
    fix: str  # a concrete code change
    doc: str = ""  # where the frameworks document it
    location: str = ""  # the first frame in the user's own files (-> the library frame that did the work)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


Obs = dict[str, Any]


def _per_step(obs: Obs, key: str) -> float | None:
    """The per-steady-step rate of a counter, or None when there were too few steady steps."""
    if obs.get("steady_steps", 0) < MIN_STEADY_STEPS:
        return None
    return float(obs.get("per_step", {}).get(key, 0.0))


def _steady_notes(obs: Obs, kind: str) -> list[dict[str, Any]]:
    t0 = obs.get("steady_from_t")
    notes = obs.get("notes", {}).get(kind, [])
    return [] if t0 is None else [n for n in notes if n["t"] >= t0]


def _sites(sites: dict[str, int], n: int = 3) -> str:
    return "; ".join(f"{s} x{c}" for s, c in list(sites.items())[:n])


def _mib(b: float) -> str:
    return f"{b / 2**20:.2f} MiB" if b >= 2**20 else f"{b / 2**10:.1f} KiB"


# -- script-error -----------------------------------------------------------------------------------------
TRACER_ERRORS = ("TracerBoolConversionError", "ConcretizationTypeError", "TracerIntegerConversionError",
                 "TracerArrayConversionError")
MEANINGS: list[tuple[Callable[[dict[str, Any]], bool], str]] = [
    (lambda e: e["type"] in TRACER_ERRORS,
     "a Python `if`/`while`/`int()` on a value traced by jit: see jax-python-control-flow"),
    (lambda e: any(m in e["message"] + e["traceback_tail"] for m in
                   ("out of memory", "RESOURCE_EXHAUSTED", "OutOfMemoryError")),
     "out of memory: lower the batch size, use bf16, or rematerialise activations (jax.checkpoint, "
     "torch.utils.checkpoint)"),
    (lambda e: e["type"] in ("ModuleNotFoundError", "ImportError"),
     "a module is missing from this environment: install it in the interpreter twinbench runs with"),
    (lambda e: e["type"] == "FileNotFoundError",
     "a file was not found: the doctor runs the script in its own folder, so paths relative to that folder work"),
    (lambda e: e["type"] == "SystemExit", "the script ended itself with a non-zero exit code"),
    (lambda e: e["type"] == "KeyboardInterrupt", "the script was interrupted"),
]


ERROR_DOCS = {"jax": f"{JAX_DOCS}/errors.html", "torch": f"{TORCH_DOCS}/torch.compiler_troubleshooting.html",
              "builtins": "https://docs.python.org/3/library/exceptions.html"}


def script_error(obs: Obs) -> Finding | None:
    """Threshold: the script raised, or exited with a non-zero code."""
    err = obs.get("error")
    if not err:
        return None
    meaning = next((m for test, m in MEANINGS if test(err)), "fix the error above: the doctor diagnoses a "
                   "script that runs, and reports what it saw up to the failure")
    first = (err.get("message") or "").strip().splitlines()
    return Finding("script-error", "error", f"the script failed: {err['type']}: {first[0][:160] if first else ''}",
                   f"after {obs.get('steps', 0)} steps; traceback tail:\n{err.get('traceback_tail', '')}",
                   meaning, ERROR_DOCS.get(err.get("module", "").split(".")[0], ERROR_DOCS["builtins"]))


# -- jax-python-control-flow --------------------------------------------------------------------------------
def jax_python_control_flow(obs: Obs) -> Finding | None:
    """Threshold: the script failed with a tracer conversion error (a Python branch on a traced value)."""
    err = obs.get("error")
    if not err or err["type"] not in TRACER_ERRORS:
        return None
    where = [ln.strip() for ln in err.get("traceback_tail", "").splitlines() if ln.strip().startswith("File ")]
    return Finding(
        "jax-python-control-flow", "error",
        "a Python if/while (or int/bool) decides on a value traced by jit",
        f"{err['type']} raised {'at ' + where[-1] if where else ''}",
        "Branch inside the computation instead of in Python:\n"
        "  if x > 0: y = f(x)          ->  y = jnp.where(x > 0, f(x), g(x))\n"
        "  (both sides expensive)      ->  y = jax.lax.cond(x > 0, f, g, x)\n"
        "  while err > tol: ...        ->  jax.lax.while_loop(cond_fn, body_fn, init)\n"
        "If the value is a Python setting (not data), make it static: jax.jit(step, static_argnames=('mode',)).",
        f"{JAX_DOCS}/control-flow.html")


# -- jax-recompile ------------------------------------------------------------------------------------------
RECOMPILE_WARN = 2  # tracing cache misses of a known function after step 1: 1 = info, >= 2 = warning
RECOMPILE_FIX = {
    "shape": "Give the step a few fixed shapes: pad the last/odd batches to the full size with a mask "
             "(x = np.pad(x, ((0, B - len(x)), (0, 0)))), drop the remainder (drop_last=True), or bucket "
             "sequence lengths to powers of two.",
    "dtype": "Cast inputs to one dtype before the call, every step: x = jnp.asarray(x, jnp.float32).",
    "weak type": "Pass the same kind of value every step: make it an array once, lr = jnp.asarray(lr, "
                 "jnp.float32), instead of a Python float on some steps and an array on others.",
    "static argument": "Do not mark a value that changes every step as static: drop it from "
                       "static_argnums/static_argnames and pass it as an array, step(state, jnp.asarray(i)).",
    "new function object": "Create the jitted function once, before the loop: step = jax.jit(train_step); "
                           "not jax.jit(lambda ...) or jax.jit(functools.partial(...)) inside it.",
    "pytree structure": "Keep the arguments' structure fixed: the same dict keys, list lengths and None-ness "
                        "every step.",
}


def recompile_cause(message: str) -> str:
    """Classify one ``jax_explain_cache_misses`` message."""
    if "never seen function" in message:
        return "new function object"
    if "weak_type" in message:
        return "weak type"
    if "Static" in message or "static" in message:
        return "static argument"
    if "different input types" in message:
        m = re.search(r"now (\w+)\[[^\]]*\][^ ]* and before (\w+)\[", message)
        return "dtype" if m and m.group(1) != m.group(2) else "shape"
    if "pytree" in message:
        return "pytree structure"
    return "other"


LIBRARY_PATHS = ("/jax/", "/jaxlib/", "/flax/", "/optax/", "/site-packages/", "/dist-packages/")


def _is_user_recompile(message: str) -> bool:
    """A retrace of a function the script compiled before (not a first trace, not a library's own)."""
    if "never seen function" in message and "seen another function defined on the same line" not in message:
        return False
    m = re.search(r"defined at (\S+)", message)
    return not (m and any(p in m.group(1) for p in LIBRARY_PATHS))


def jax_recompile(obs: Obs) -> Finding | None:
    """Threshold: >= 2 recompiles (tracing cache misses) of an already-compiled function after step 1; a
    function traced inside another one's trace (e.g. a shard_map body defined in the step) is not one."""
    misses = [n["message"] for n in _steady_notes(obs, "cache_miss")
              if not n.get("nested") and _is_user_recompile(n["message"])]
    if not misses:
        return None
    causes = Counter(recompile_cause(m) for m in misses)
    top = causes.most_common(1)[0][0]
    example = next(m for m in misses if recompile_cause(m) == top)
    detail = [ln.strip() for ln in example.splitlines()[1:] if ln.strip()][-3:]
    compiles = _steady_notes(obs, "compile")
    steady_compile_s = sum(n.get("s", 0.0) for n in compiles)
    severity = "warning" if len(misses) >= RECOMPILE_WARN else "info"
    return Finding(
        "jax-recompile", severity,
        f"jit traced and compiled again {len(misses)} times after step 1 (cause: {top})",
        f"{len(misses)} tracing cache misses after step 1 (of {obs.get('steps', 0)} steps) "
        f"({', '.join(f'{c}: {n}' for c, n in causes.items())}); {len(compiles)} XLA compiles, "
        f"{steady_compile_s:.2f} s of backend compile after step 1; jax_explain_cache_misses says: "
        + " | ".join(detail) + f" (warning from {RECOMPILE_WARN} recompiles)",
        RECOMPILE_FIX.get(top, "Keep every argument's shape, dtype, weak type and structure the same each step.")
        + " Then keep it fixed: run steps 2.. under `with jax.no_tracing(True):` in a test (a retrace raises).",
        f"{JAX_DOCS}/jit-compilation.html#caching")


# -- jax-eager-ops -----------------------------------------------------------------------------------------
EAGER_OPS_WARN = 20  # primitives dispatched one by one outside jit, per steady step
EAGER_OPTAX_WARN = 0.5  # Optax updates run outside jit, per steady step


def jax_eager_ops(obs: Obs) -> Finding | None:
    """Threshold: >= 20 JAX ops dispatched one by one (outside jit) per step, or the Optax update
    run outside jit on at least every other step."""
    ops = _per_step(obs, "eager_ops")
    optax_rate = _per_step(obs, "optax_eager_updates") or 0.0
    if ops is None or (ops < EAGER_OPS_WARN and optax_rate < EAGER_OPTAX_WARN):
        return None
    eager_ms = (_per_step(obs, "eager_s:s") or 0.0) * 1e3
    sources = obs.get("info", {}).get("eager_sources", {})
    total = sum(sources.values()) or 1
    src = ", ".join(f"{k} {100 * v / total:.0f}%" for k, v in list(sources.items())[:4])
    optax_eager = optax_rate >= EAGER_OPTAX_WARN
    fix = ("Put the whole step, optimizer update included, inside one jitted function:\n"
           "  @jax.jit\n"
           "  def train_step(params, opt_state, batch):\n"
           "      loss, grads = jax.value_and_grad(loss_fn)(params, batch)\n"
           "      updates, opt_state = tx.update(grads, opt_state, params)\n"
           "      return optax.apply_updates(params, updates), opt_state, loss\n"
           "(Flax NNX: decorate the step that calls optimizer.update(model, grads) with @nnx.jit.)")
    return Finding(
        "jax-eager-ops", "warning",
        f"{ops:.0f} ops per step run one by one outside jit" + (" (the Optax update among them)" if optax_eager else ""),
        f"{ops:.0f} eager primitive dispatches and jax.Array operators (+ - * / ** @) counted per step (a "
        f"jnp function called outside jit dispatches on a C++ path the count does not see) taking {eager_ms:.2f} ms of a {obs.get('step_ms') or 0:.2f} ms "
        f"step; they come from: {src or 'unknown'}; Optax updates outside jit: {optax_rate:.1f} per step; "
        f"each eager op is a separate dispatch (and its Python-number operands each a host-to-device copy: "
        f"{_per_step(obs, 'h2d_guard') or 0:.0f} per step) (warning from {EAGER_OPS_WARN} eager ops or "
        f"{EAGER_OPTAX_WARN:g} eager Optax updates per step)", fix,
        f"{JAX_DOCS}/jit-compilation.html")


# -- jax-no-donation ---------------------------------------------------------------------------------------
DONATION_MIN_BYTES = 1 << 20  # state replaced every step, not donated, at least this large
DONATION_SHARE = 0.5  # ... and less than this share of it donated


def jax_no_donation(obs: Obs) -> Finding | None:
    """Threshold: >= 1 MiB of state is passed in and returned every step, and < 50% of it is donated."""
    info = obs.get("info", {})
    carried = info.get("carried", {}).get("bytes", 0)
    donated = info.get("donated_bytes")
    if donated is None or carried < DONATION_MIN_BYTES or donated >= DONATION_SHARE * carried:
        return None
    mem = info.get("memory", {})
    per_device = info.get("carried", {}).get("device_bytes") or carried
    if mem and mem.get("alias_size_in_bytes", 0) >= DONATION_SHARE * per_device:
        return None  # the executable aliases (donates) the state on each device, whatever args_info says
    if mem:  # compare like with like: XLA's memory analysis is per device
        carried, donated = per_device, max(donated * per_device // max(carried, 1), 0)
    mem_txt = (f"; XLA memory analysis of the step: arguments {_mib(mem['argument_size_in_bytes'])}, outputs "
               f"{_mib(mem['output_size_in_bytes'])}, aliased (donated) {_mib(mem['alias_size_in_bytes'])}"
               if mem else "")
    return Finding(
        "jax-no-donation", "warning",
        f"{_mib(carried)} of params/optimizer state is copied every step instead of updated in place",
        f"{info['carried'].get('leaves', 0)} arrays ({_mib(carried)}" + (" per device" if mem else "")
        + f") that each step returns are passed to the next step; {_mib(donated)} of them donated "
        f"(Lowered.args_info; the executable aliases {_mib(mem.get('alias_size_in_bytes', 0))}), so the step holds old and new copies "
        f"at once: about {_mib(carried - donated)} more device memory at peak{mem_txt} "
        f"(warning from {_mib(DONATION_MIN_BYTES)} not donated)",
        "Donate the state the step replaces: jax.jit(train_step, donate_argnums=(0, 1)) "
        "(or donate_argnames=('params', 'opt_state')); with Flax NNX: "
        "nnx.jit(train_step, donate_argnames=('model', 'optimizer')). Do not use the old arrays after the call.",
        f"{JAX_DOCS}/faq.html#buffer-donation")


# -- jax-host-sync -------------------------------------------------------------------------------------------
HOST_SYNC_WARN = 1.0  # device values read on the host per steady step: a finding from this many
HOST_SYNC_WAIT_SHARE = 0.05  # ... a warning when the host waits in them this share of the step, else info


def _iter_ms(obs: Obs) -> float:
    """The one step definition every percentage uses: the mean steady iteration, from one step's start to
    the next (per-step figures are means over the same iterations, so a share can never pass 100%)."""
    return float(obs.get("iter_ms") or obs.get("step_ms") or 0.0)


def _host_sync_cost(obs: Obs, seconds_key: str) -> tuple[str, str]:
    """Severity and evidence from the measured time the host spent in its reads (waiting for the device)."""
    iter_ms = _iter_ms(obs)
    if f"{seconds_key}:s" not in obs.get("per_step", {}) or not iter_ms:
        return "warning", " (warning from 1 per step; the wait could not be measured)"
    wait_ms = 1e3 * (_per_step(obs, f"{seconds_key}:s") or 0.0)
    share = wait_ms / iter_ms
    return ("warning" if share >= HOST_SYNC_WAIT_SHARE else "info",
            f"; measured cost: the host waited {wait_ms:.3f} ms per step in these reads, {100 * share:.1f}% of "
            f"the {iter_ms:.2f} ms steady iteration (mean, one step start to the next; warning from "
            f"{100 * HOST_SYNC_WAIT_SHARE:.0f}% of it, else info)")


LIB_CONVERSIONS = ("(int)", "(bool)", "(index)")  # a library reading a JAX index element by element


def _read_location(sites: dict[str, int]) -> str:
    """The busiest read site, without its conversion: ``your file:line `code` -> library file:line``."""
    top = next(iter(sites), "")
    return re.sub(r" \((\w+)\)$", "", top)


def jax_host_sync(obs: Obs) -> Finding | None:
    """Threshold: >= 1 device value read on the host (float, .item(), print, bool) per step; a warning when
    the reads cost the loop >= 5% of the mean steady iteration on the host (the time of each line's burst of
    reads less the part spent waiting for a step still running on the device, plus that wait where the
    device then sat idle between steps), else info."""
    reads = _per_step(obs, "jax_host_reads")
    if reads is None or reads < HOST_SYNC_WARN:
        return None
    sites = obs.get("info", {}).get("jax_host_read_sites", {})
    iter_ms = _iter_ms(obs)
    span = _per_step(obs, "jax_host_read_span_s:s")
    # element-wise integer/bool reads, several per step: code (a library's, or yours) indexing with a JAX array
    elementwise = sum(c for k, c in sites.items() if k.endswith(LIB_CONVERSIONS))
    library_index = reads >= 4 and elementwise >= 0.5 * sum(sites.values())
    if span is None or not iter_ms or "jax_host_read_span_s:s" not in obs.get("per_step", {}):
        severity, cost = _host_sync_cost(obs, "jax_host_read_s")
    else:
        span_ms = 1e3 * span
        blocked_ms = 1e3 * (_per_step(obs, "jax_host_read_blocked_s:s") or 0.0)
        host_ms = max(span_ms - blocked_ms, 0.0)
        split = obs.get("split") or {}
        idle_ms = split.get("idle_mean_ms", split.get("idle_ms", 0.0)) if split.get("async") else 0.0
        # the sync's lost overlap: the wait, up to the device's idle time between steps that the reads' own host
        # work does not already explain (the split counts that work as the host's, not as idle)
        overlap_ms = min(blocked_ms, idle_ms)
        lost_ms = host_ms + overlap_ms
        share = lost_ms / iter_ms
        severity = "warning" if share >= HOST_SYNC_WAIT_SHARE else "info"
        cost = (f"; measured cost: {span_ms:.2f} ms per step in these reads (from each line's first read to its "
                f"last, the library's work in between included), of which {blocked_ms:.2f} ms waited for the step "
                f"still running on the device (the step's own time) and {host_ms:.2f} ms was the host's work "
                f"while the device sat idle; with the sync's lost overlap ({overlap_ms:.2f} ms: the device's "
                f"other idle time between steps) the loop lost {lost_ms:.2f} ms per step, {100 * share:.1f}% of "
                f"the {iter_ms:.2f} ms steady iteration (mean, one step start to the next; warning from "
                f"{100 * HOST_SYNC_WAIT_SHARE:.0f}% of it, else info)")
    where = _read_location(sites)
    if library_index:
        title = f"{reads:.0f} device values read on the host every step: a JAX array is read element by element"
        fix = ("Index with NumPy, not with a JAX array (a library given one reads it element by element): batch = "
               "dataset[np.asarray(perm)] (or build the permutation with NumPy: perms = "
               "np.random.default_rng(seed).permutation(n)); each element of a JAX array read with int()/bool() "
               "is a separate device read and small dispatch.")
    else:
        title = f"{reads:.1f} device values read on the host every step: the loop waits for the device each time"
        fix = ("Keep values on the device and read them rarely: losses.append(loss) in the loop and "
               "print(float(jnp.mean(jnp.stack(losses)))) every 100 steps or after it; inside jit use "
               "jax.debug.print; for early stopping, check every N steps.")
    return Finding(
        "jax-host-sync", severity, title,
        f"{reads:.1f} host reads per step ({_sites(sites)}); each one blocks until the value is computed, so "
        f"the next step cannot be dispatched ahead{cost}", fix,
        f"{JAX_DOCS}/async_dispatch.html", location=where)


# -- jax-host-transfer ---------------------------------------------------------------------------------------
TRANSFER_WARN_SHARE = 0.05  # estimated copy time per step, as a share of the step, from which it is a warning


def jax_host_transfer(obs: Obs) -> Finding | None:
    """Threshold: >= 1 host (NumPy) array implicitly copied to the device per step by the step call."""
    arrays = _per_step(obs, "h2d_numpy_args")
    guard = _per_step(obs, "h2d_guard_arrays") or 0.0
    if arrays is None or max(arrays, guard) < 1:
        return None
    nbytes = _per_step(obs, "h2d_numpy_bytes") or 0.0
    guard_all = _per_step(obs, "h2d_guard") or 0.0
    h2d = obs.get("info", {}).get("h2d", {})
    severity, cost = "warning", ""
    step_ms = _iter_ms(obs)
    if h2d.get("bytes_per_s") and step_ms:  # the cost in this run: bytes over the measured bandwidth, plus
        # one measured transfer latency per array
        copy_ms = 1e3 * nbytes / h2d["bytes_per_s"]
        cost_ms = copy_ms + 1e3 * max(arrays, guard) * h2d.get("latency_s", 0.0)
        share = cost_ms / step_ms
        # the margin: the copy time alone (the latency of a tiny device_put is mostly the call's own dispatch,
        # and noisy) must reach the threshold, so a run-to-run spread of the latency cannot flip it
        severity = "warning" if copy_ms / step_ms >= TRANSFER_WARN_SHARE else "info"
        cost = (f"; estimated cost {copy_ms:.3f} ms per step for the bytes at the measured "
                f"{h2d['bytes_per_s'] / 2**30:.2f} GiB/s host-to-device, at most {cost_ms:.3f} ms with "
                f"{1e3 * h2d.get('latency_s', 0.0):.3f} ms per transfer ({100 * copy_ms / step_ms:.1f}% to "
                f"{100 * share:.1f}% of the {step_ms:.2f} ms steady iteration; warning when the bytes alone reach "
                f"{100 * TRANSFER_WARN_SHARE:.0f}% of the step)")
    return Finding(
        "jax-host-transfer", severity,
        f"{max(arrays, guard):.0f} host arrays are copied to the device inside every step call",
        f"{arrays:.1f} NumPy arrays ({_mib(nbytes)}) per step passed straight to the jitted step; the transfer "
        f"guard (log mode) saw {guard_all:.1f} implicit host-to-device transfers per step, {guard:.1f} of them "
        f"shaped arrays" + (cost or " (warning from 1 array per step; the bandwidth could not be measured)"),
        "Put batches on the device ahead of the step that uses them: batch = jax.device_put(next(it)) one "
        "step early (a small prefetch queue), or build the data on the device; with several devices "
        "device_put straight into the batch sharding.",
        f"{JAX_DOCS}/transfer_guard.html")


# -- jax-replicated-batch ------------------------------------------------------------------------------------
def jax_replicated_batch(obs: Obs) -> Finding | None:
    """Threshold: > 1 device, and every per-step input of the jitted step sits whole on each device."""
    info = obs.get("info", {})
    fresh = info.get("fresh_args", [])
    devices = info.get("devices", 1)
    if devices <= 1 or not fresh or obs.get("step_kind") != "jit" or not all(a["replicated"] for a in fresh):
        return None
    desc = "; ".join(f"{tuple(a['shape'])} {a['kind']} "
                     + ("on 1 device" if a["devices"] == 1 else f"replicated on {a['devices']} devices")
                     for a in fresh[:3])
    return Finding(
        "jax-replicated-batch", "warning",
        f"{devices} devices, but the batch is not sharded: one device (or every device) computes all of it",
        f"per-step inputs of {obs.get('step_fn')}: {desc} (Array.sharding); threshold: every per-step input "
        f"unsharded while {devices} devices are visible",
        "Shard the batch over a data axis; jit then splits the work:\n"
        "  mesh = jax.make_mesh((jax.device_count(),), ('data',))\n"
        "  batch = jax.device_put(batch, NamedSharding(mesh, P('data')))\n"
        "  params = jax.device_put(params, NamedSharding(mesh, P()))  # replicated\n"
        "Check with jax.debug.visualize_array_sharding(batch).",
        f"{JAX_DOCS}/sharded-computation.html")


# -- jax-pmap-legacy -------------------------------------------------------------------------------------------
def jax_pmap_legacy(obs: Obs) -> Finding | None:
    """Threshold: a pmap-ed function was called at all (pmap is in maintenance; jit + shardings replaces it)."""
    calls = obs.get("counters", {}).get("pmap_calls", 0)
    if not calls:
        return None
    return Finding(
        "jax-pmap-legacy", "warning", "data parallelism through pmap: the legacy API",
        f"pmap-ed functions were called {calls:.0f} times",
        "Use one jit with shardings instead of pmap + axis_name:\n"
        "  mesh = jax.make_mesh((jax.device_count(),), ('data',))\n"
        "  batch = jax.device_put(batch, NamedSharding(mesh, P('data')))\n"
        "  step = jax.jit(train_step)  # no pmean: grads of the global mean loss are already summed\n"
        "Drop the leading device axis, jax.lax.pmean and jax_utils.replicate.",
        f"{JAX_DOCS}/migrate_pmap.html")


# -- torch-recompile ---------------------------------------------------------------------------------------
def torch_recompile(obs: Obs) -> Finding | None:
    """Threshold: >= 1 dynamo recompilation (a guard failed after the first compile)."""
    notes = obs.get("notes", {}).get("recompile", [])
    if not notes:
        return None
    reasons = Counter(_guard_reason(n["message"]) for n in notes)
    shape = any("size mismatch" in r or "stride" in r for r in reasons)
    fix = ("Mark the varying dimension dynamic before the first call, torch._dynamo.mark_dynamic(x, 0), "
           "or pad batches to a few fixed sizes; torch.compile(model, dynamic=True) compiles shape-generic "
           "code once." if shape else
           "Keep what the guards check constant between calls (Python numbers, attributes, globals, "
           "tensor dtypes/devices); pass changing numbers as tensors.")
    return Finding(
        "torch-recompile", "warning",
        f"torch.compile recompiled {len(notes)} times",
        f"{len(notes)} recompilations ({obs.get('info', {}).get('torch_graphs', '?')} graphs in all); "
        f"guard failures: " + "; ".join(f"{r} x{c}" for r, c in reasons.most_common(3))
        + " (warning from 1 recompile)",
        fix, f"{TORCH_DOCS}/torch.compiler_troubleshooting.html")


def _guard_reason(message: str) -> str:
    lines = [ln.strip() for ln in message.splitlines() if ln.strip().startswith("- ")]
    head = message.splitlines()[0] if message else ""
    return (lines[0][2:] if lines else head)[:200]


# -- torch-graph-break ------------------------------------------------------------------------------------------
def torch_graph_break(obs: Obs) -> Finding | None:
    """Threshold: >= 1 graph break in a compiled function."""
    notes = obs.get("notes", {}).get("graph_break", [])
    if not notes:
        return None
    reasons: Counter[str] = Counter()
    for n in notes:
        msg = n["message"]
        where = re.search(r"in user code at (\S+)", msg)
        reason = re.search(r"Graph Break Reason: (.*)", msg)
        text, at = (reason.group(1) if reason else msg.splitlines()[0]), (where.group(1) if where else "?")
        if "twinbench/doctor/" in at:  # the doctor's host-read wrapper: the user's code read a tensor there
            text, at = "a tensor read on the host (.item(), float(), bool, print) inside the compiled code", "?"
        reasons[f"{text} at {at}"] += 1
    return Finding(
        "torch-graph-break", "warning",
        f"torch.compile split the function at {len(reasons)} graph breaks",
        "dynamo's break reasons: " + "; ".join(f"{r} (x{c})" for r, c in reasons.most_common(3))
        + " (warning from 1 break)",
        "Remove what dynamo cannot trace from the compiled code: a branch on a tensor value -> torch.where(cond, "
        "a, b) or torch.cond; .item()/print/numpy -> move out of the compiled function. Then compile with "
        "fullgraph=True so a new break fails loudly; torch._dynamo.explain(fn)(*args) lists them all.",
        f"{TORCH_DOCS}/torch.compiler_troubleshooting.html")


# -- torch-host-sync ---------------------------------------------------------------------------------------------
def torch_host_sync(obs: Obs) -> Finding | None:
    """Threshold: >= 1 tensor read on the host (.item(), float(), print) or CUDA sync per step."""
    reads = _per_step(obs, "torch_host_reads")
    syncs = _per_step(obs, "cuda_syncs") or 0.0
    if reads is None or max(reads, syncs) < HOST_SYNC_WARN:
        return None
    sites = obs.get("info", {}).get("torch_host_read_sites", {})
    severity, cost = _host_sync_cost(obs, "torch_host_read_s")
    if syncs >= HOST_SYNC_WARN:  # synchronising CUDA calls inside torch are not timed: each drains the queue
        severity = "warning"
    return Finding(
        "torch-host-sync", severity,
        f"{max(reads, syncs):.1f} tensor values read on the host every step"
        + (": the GPU queue drains each time" if obs.get("info", {}).get("cuda") else ""),
        f"{reads:.1f} host reads per step ({_sites(sites)}); {syncs:.1f} synchronising CUDA calls per step "
        f"(torch.cuda.set_sync_debug_mode, a warning from {HOST_SYNC_WARN:g} per step){cost}",
        "Accumulate on the device and read rarely: running = running + loss.detach() in the loop, "
        "print((running / n).item()) every 100 steps; avoid print(loss), float(loss), .tolist() and "
        "`if loss < x` in the loop.",
        f"{TORCH_DOCS}/generated/torch.cuda.set_sync_debug_mode.html", location=_read_location(sites))


# -- input-bound ----------------------------------------------------------------------------------------------------
INPUT_WAIT_SHARE = 0.20  # of each steady iteration spent waiting for the next batch
INPUT_MIN_MS = 1.0  # per iteration: a shorter wait between steps is the loop's own Python, not its input


def _input_wait(obs: Obs) -> tuple[float, float, str] | None:
    """(wait ms, iteration ms, the split as evidence) per steady iteration, or None if not measurable."""
    if obs.get("steady_steps", 0) < MIN_STEADY_STEPS:
        return None
    split = obs.get("split")
    if not split:  # no step end known: the DataLoader's wait against the time between step starts
        wait, step_ms = _per_step(obs, "data_wait_s:s"), obs.get("step_ms")
        if wait is None or not step_ms:
            return None
        return wait * 1e3, step_ms, (f"{wait * 1e3:.1f} ms per step waiting for the next batch of a "
                                     f"{step_ms:.1f} ms step (DataLoader iterator)")
    it, step, data, host = split["iter_ms"], split["step_ms"], split["data_ms"], split["host_ms"]
    head = f"per iteration (medians over {split['iterations']} steady iterations, {it:.2f} ms): "
    if split.get("async"):  # the device's idle time: from the step's results being ready to the next call
        wait = split.get("idle_ms", max(it - step - host, 0.0))
        return wait, it, (
            head + f"{wait:.2f} ms the device waited for the host between steps (the next batch, or other Python "
            f"work of the loop; DataLoader next: {data:.2f} ms), {step:.2f} ms the step from its call to its "
            f"results being ready (block_until_ready on its output, in the doctor's watcher thread, so the "
            f"loop keeps its asynchronous dispatch), {host:.2f} ms known host work (eager ops, compilation)")
    gap = split.get("to_forward_ms", 0.0) if obs.get("step_kind") == "torch-optimizer" else 0.0
    wait = max(data, gap)
    where = (f"the optimizer step's end to the next forward pass: the next batch from any Python iterator "
             f"(DataLoader next: {data:.2f} ms), zero_grad, the loop's Python; host reads left out"
             if gap > data else "DataLoader next")
    return wait, it, (head + f"{wait:.2f} ms waiting for the next batch ({where}), {step:.2f} ms in the "
                      f"step ({obs.get('step_signal') or obs.get('step_kind')}), {max(it - wait - step, 0.0):.2f} "
                      f"ms the rest (forward, backward, the loop's Python)")


def input_bound(obs: Obs) -> Finding | None:
    """Threshold: the loop waits for its next batch > 20% of each steady iteration (and >= 1 ms).

    For an asynchronous step (JAX jit) the wait is the device's idle time between steps; for a synchronous
    one (PyTorch), the DataLoader's ``next``, or with an optimizer the time from its step's end to the next
    forward pass (a batch from any Python iterator)."""
    measured = _input_wait(obs)
    if measured is None:
        return None
    wait, it, evidence = measured
    share = wait / it if it else 0.0
    if share <= INPUT_WAIT_SHARE or wait < INPUT_MIN_MS:
        return None
    return Finding(
        "input-bound", "warning",
        f"the loop waits for its input {100 * share:.0f}% of the time",
        f"{evidence}; {100 * share:.0f}% of the iteration waiting for input (warning above "
        f"{100 * INPUT_WAIT_SHARE:.0f}% of the iteration and from {INPUT_MIN_MS:g} ms)",
        "Load ahead of the training step: DataLoader(ds, batch_size=B, num_workers=4, pin_memory=True, "
        "persistent_workers=True, prefetch_factor=2); move per-sample work (decoding, tokenising) offline or "
        "into the workers; a Python generator: tokenise once ahead of training, or produce batches in "
        "background workers (grain.DataLoader with worker_count, or a thread feeding a queue); for JAX, "
        "prefetch batches to the device (jax.device_put one step ahead).",
        f"{TORCH_DOCS}/data.html#multi-process-data-loading")


# -- compile-dominates --------------------------------------------------------------------------------------------
COMPILE_SHARE = 0.30  # of the script's wall time
COMPILE_MIN_S = 1.0  # below this, compilation is too short to mention whatever its share
COMPILE_WARN_S = 120.0  # a warning from this much compilation; below it (a toy or a cut run) only info. Far
# from the run-to-run spread of one script's compile time (+-30% on a loaded machine): 25-32 s never flips it


def compile_dominates(obs: Obs) -> Finding | None:
    """Threshold: compilation takes > 30% of the script's wall time: info from 1 s, warning from 120 s."""
    compile_s, wall = obs.get("compile_s", 0.0), obs.get("wall_s", 0.0)
    if not wall or compile_s < COMPILE_MIN_S or compile_s / wall <= COMPILE_SHARE:
        return None
    severity = "warning" if compile_s >= COMPILE_WARN_S else "info"
    fws = obs.get("frameworks", [])
    fix = []
    if "jax" in fws:
        fix.append("JAX: keep compiled programs across runs, jax.config.update('jax_compilation_cache_dir', "
                   "'~/.cache/jax') (and jax_persistent_cache_min_compile_time_secs=0); compile one layer "
                   "and scan over the stack (nnx.scan / jax.lax.scan instead of a Python loop of layers); "
                   "fewer distinct input shapes.")
    if "torch" in fws:
        fix.append("PyTorch: compile the repeated block instead of the whole model (regional compilation: "
                   "torch.compile each layer), keep the FX graph cache on (TORCHINDUCTOR_FX_GRAPH_CACHE=1), "
                   "avoid recompiles (fixed or dynamic shapes).")
    return Finding(
        "compile-dominates", severity,
        f"compilation takes {100 * compile_s / wall:.0f}% of the run",
        f"{compile_s:.1f} s compiling of {wall:.1f} s wall time over {obs.get('steps', 0)} steps "
        f"(above {100 * COMPILE_SHARE:.0f}%: info from {COMPILE_MIN_S:g} s of compilation, warning from "
        f"{COMPILE_WARN_S:g} s); a longer run amortises it",
        "\n".join(fix) or "Cache compiled programs across runs and compile fewer distinct shapes.",
        f"{JAX_DOCS}/persistent_compilation_cache.html")


# -- nnx-graph-overhead ---------------------------------------------------------------------------------------------
NNX_GRAPH_INFO_SHARE = 0.05  # nnx.jit's Python graph traversal per call, as a share of the steady iteration: info
NNX_GRAPH_WARN_SHARE = 0.15  # ... a warning from this share (3x the info line) when the step is passed the
# modules/optimizer themselves (graph nodes, traversed every call) and they are a large graph (the guide's case:
# a small model's traversal is a fixed cost); nnx.cached_partial's remaining Python is info
NNX_GRAPH_WARN_LEAVES = 64  # state leaves (params, optimizer state, rngs) traversed per call


def nnx_graph_overhead(obs: Obs) -> Finding | None:
    """Threshold: ``nnx.jit``'s own Python around the jitted call (splitting the module graph into state and
    merging it back) takes >= 5% of the steady iteration (info), >= 15% (warning)."""
    graph = _per_step(obs, "nnx_graph_s:s")
    nodes = _per_step(obs, "nnx_graph_calls") or 0.0
    leaves = obs.get("info", {}).get("nnx_graph_leaves", 0)
    iter_ms = _iter_ms(obs)
    if not graph or not iter_ms:
        return None
    ms = 1e3 * graph
    share = ms / iter_ms
    if share < NNX_GRAPH_INFO_SHARE:
        return None
    return Finding(
        "nnx-graph-overhead",
        "warning" if share >= NNX_GRAPH_WARN_SHARE and nodes >= 1 and leaves >= NNX_GRAPH_WARN_LEAVES else "info",
        f"nnx.jit spends {100 * share:.0f}% of each step in Python, traversing the module graph",
        f"measured {ms:.2f} ms per step in nnx.jit's own Python (from your call to its jax.jit call, and from that "
        f"call's return to yours: split and merge of the graph), {100 * share:.1f}% of the {iter_ms:.2f} ms "
        f"steady iteration; {nodes:.0f} calls per step are passed modules/optimizers, {leaves} state leaves traversed "
        f"on each call (info from {100 * NNX_GRAPH_INFO_SHARE:.0f}%, warning from "
        f"{100 * NNX_GRAPH_WARN_SHARE:.0f}% when modules of >= {NNX_GRAPH_WARN_LEAVES} state leaves are passed per call)",
        "Traverse the graph once, not every call: step = nnx.cached_partial(train_step, model, optimizer) "
        "then step(batch); or the functional style: graphdef, state = nnx.split((model, optimizer)) once, "
        "a jax.jit(step, donate_argnums=(0,)) on (state, batch) that calls nnx.merge(graphdef, state) inside and "
        "returns nnx.state(...), and nnx.update((model, optimizer), state) after the loop.",
        "https://flax.readthedocs.io/en/latest/guides/performance.html", location=_step_location(obs))


def _step_location(obs: Obs) -> str:
    """The step function's definition (``file:line name``) from the doctor's key for it."""
    key = obs.get("info", {}).get("step_def") or ""
    parts = key.split(":")
    if len(parts) >= 4 and parts[-2].isdigit():
        return f"{':'.join(parts[1:-2])}:{parts[-2]} (def {parts[-1]})"
    return ""


# -- jax-unrolled-loop ----------------------------------------------------------------------------------------------
UNROLL_WARN_S = 0.5  # compile seconds spent on the repeated copies (all but the first): info below, warning from


def jax_unrolled_loop(obs: Obs) -> Finding | None:
    """Threshold: the step's program holds >= 4 back-to-back copies of one unit of >= 8 equations (a Python loop
    unrolled by jit); warning when the copies after the first cost >= 0.5 s of its backend compile (the compile
    time in proportion to the equations they are), info below."""
    prog = obs.get("info", {}).get("step_program") or {}
    rep = prog.get("repeat")
    if not rep:
        return None
    extra = (rep["copies"] - 1) * rep["period"]
    share = extra / max(rep["eqns"], 1)
    compile_s = prog.get("compile_s", 0.0)
    cost = compile_s * share
    return Finding(
        "jax-unrolled-loop", "warning" if cost >= UNROLL_WARN_S else "info",
        f"a Python loop is unrolled inside the jitted step: {rep['copies']} copies of the same "
        f"{rep['period']} operations",
        f"the step's program (jaxpr, nested calls inlined) is {rep['eqns']} equations, {rep['copies']} x "
        f"{rep['period']} of them one unit repeated back to back (from equation {rep['start']}): "
        f"{100 * share:.0f}% of the program is copies; its backend compile took {compile_s:.2f} s, about "
        f"{cost:.2f} s of it for the copies, and trace and compile time grow with the loop's count (info from 4 "
        f"copies of >= 8 operations, warning from {UNROLL_WARN_S:g} s of compile for the copies)",
        "Loop inside the program instead of in Python, so the body is traced and compiled once:\n"
        "  gradient accumulation: (grads, loss), _ = jax.lax.scan(micro_step, (zeros, 0.0), (xs, ys))\n"
        "  a fixed count:         x = jax.lax.fori_loop(0, n, body, x)\n"
        "  a stack of layers:     stack the layers' params and jax.lax.scan over them; in Flax NNX create "
        "them with nnx.vmap and apply them with nnx.scan",
        f"{JAX_DOCS}/control-flow.html", location=_step_location(obs))


# -- jax-attention-kernel -------------------------------------------------------------------------------------------
ATTN_WARN_BYTES = 1 << 20  # on a GPU, an unfused score tensor of this size (per attention call) warns


def jax_attention_kernel(obs: Obs) -> Finding | None:
    """Threshold: on a GPU, attention computed unfused (a softmax between two batched dots: the [.., q, k]
    score matrix written to memory and read back) with a score tensor >= 1 MiB is a warning; on other
    backends (no fused kernel to pick) or a smaller one, info. A cuDNN fused attention call: nothing."""
    prog = obs.get("info", {}).get("step_program") or {}
    att, backend = prog.get("attention"), prog.get("backend", "?")
    if not att or att.get("kind") != "unfused":
        return None
    size = att["scores_bytes"]
    gpu = backend in ("gpu", "cuda", "rocm")
    how = ("jax.nn.dot_product_attention with its XLA implementation" if att.get("dot_product_attention")
           else "written out: softmax(q @ k^T) @ v")
    where = ("on this GPU no fused kernel is used" if gpu else
             f"on the {backend} backend there is no fused kernel to choose; on a GPU this would not be fused either")
    return Finding(
        "jax-attention-kernel", "warning" if gpu and size >= ATTN_WARN_BYTES else "info",
        f"attention is computed unfused ({how})",
        f"the compiled step has a softmax between two batched dots, no fused attention call: the score tensor "
        f"{att['dtype']}{att['scores_shape']} ({_mib(size)}) is written to memory and read back in each call; "
        f"{where} (warning on a GPU from a {_mib(ATTN_WARN_BYTES)} score tensor)",
        "Call the fused kernel: jax.nn.dot_product_attention(q, k, v, mask=..., is_causal=True, "
        "implementation='cudnn') on an NVIDIA GPU, with q, k, v in bfloat16 (cuDNN's flash attention takes "
        "bf16/fp16; its layout is [batch, seq, heads, head_dim]); in Flax NNX pass "
        "attention_fn=partial(jax.nn.dot_product_attention, implementation='cudnn') where the layer takes one.",
        f"{JAX_DOCS}/_autosummary/jax.nn.dot_product_attention.html", location=_step_location(obs))


# -- cpu-oversubscribed ---------------------------------------------------------------------------------------------
BUSY_INFO_SHARE = 0.10  # other processes keep this share of the cores busy during the steady steps: info
BUSY_WARN_SHARE = 0.25  # ... a warning from this share (2.5x the info line: the margin noise cannot cross),
# when the framework's threads and the others' load together ask for more cores than the machine has


def cpu_oversubscribed(obs: Obs) -> Finding | None:
    """Threshold: other processes keep >= 10% of the cores busy during the steady steps (info); a warning from
    25% when the framework's threads plus that load ask for more cores than there are."""
    m = obs.get("machine") or {}
    cores, others = m.get("cores") or 0, m.get("others_cores")
    if not cores or others is None or others < BUSY_INFO_SHARE * cores:
        return None
    threads = obs.get("info", {}).get("threads", {})
    want = max(threads.values(), default=0)
    over = others + want > cores
    severity = "warning" if over and others >= BUSY_WARN_SHARE * cores else "info"
    free = max(int(cores - others + 0.5), 1)
    tdesc = ", ".join(f"{fw} {n} threads" for fw, n in threads.items()) or "threads unknown"
    return Finding(
        "cpu-oversubscribed", severity,
        f"the machine is busy: other processes kept {others:.1f} of {cores} cores busy while the steps ran",
        f"measured over {m.get('window_s', 0):.1f} s of steady steps (/proc/stat against this process's CPU time): "
        f"other processes {others:.2f} cores, this script {m.get('own_cores', 0):.2f} cores, {cores} cores in all; "
        f"the frameworks use {tdesc}, so {others + want:.1f} cores are asked for (info from "
        f"{100 * BUSY_INFO_SHARE:.0f}% of the cores busy elsewhere; warning from {100 * BUSY_WARN_SHARE:.0f}% when "
        f"more cores are asked for than there are); threads that wait for each other slow down far more than "
        f"their share, and any timing of this run is unreliable",
        f"Use the cores that are free (about {free} here): torch.set_num_threads({free}) or OMP_NUM_THREADS={free}; "
        f"for JAX on the CPU, XLA_FLAGS='--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads={free}'; "
        "or run when the machine is idle (pin with taskset -c to cores nobody else uses).",
        f"{TORCH_DOCS}/generated/torch.set_num_threads.html")


CHECKS: tuple[Callable[[Obs], Finding | None], ...] = (
    script_error, jax_python_control_flow, jax_recompile, jax_eager_ops, jax_no_donation, jax_host_sync,
    jax_host_transfer, jax_replicated_batch, jax_pmap_legacy, torch_recompile, torch_graph_break,
    torch_host_sync, input_bound, compile_dominates, cpu_oversubscribed, nnx_graph_overhead, jax_unrolled_loop,
    jax_attention_kernel,
)
IDS = ("script-error", "jax-python-control-flow", "jax-recompile", "jax-eager-ops", "jax-no-donation",
       "jax-host-sync", "jax-host-transfer", "jax-replicated-batch", "jax-pmap-legacy", "torch-recompile",
       "torch-graph-break", "torch-host-sync", "input-bound", "compile-dominates", "cpu-oversubscribed",
       "nnx-graph-overhead", "jax-unrolled-loop", "jax-attention-kernel")


def diagnose(obs: Obs) -> list[Finding]:
    """Every finding for these observations, worst first."""
    found = [f for check in CHECKS if (f := check(obs)) is not None]
    where = _step_location(obs)
    for f in found:  # a finding about the step, with no line of its own: the step's definition
        if not f.location and where and f.id not in ("script-error", "compile-dominates", "cpu-oversubscribed"):
            f.location = where
    return sorted(found, key=lambda f: SEVERITIES.index(f.severity))


def serious(findings: list[Finding]) -> bool:
    """True when something of severity warning or worse was found (the doctor then exits 1)."""
    return any(f.severity in ("error", "warning") for f in findings)
