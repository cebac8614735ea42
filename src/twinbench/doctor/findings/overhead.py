"""Python work around the compiled step: ``nnx-graph-overhead``."""

from __future__ import annotations

from twinbench.doctor.findings.base import Finding, Obs, _iter_ms, _per_step, _step_location, finding

# -- nnx-graph-overhead ---------------------------------------------------------------------------------------------
NNX_GRAPH_INFO_SHARE = 0.05  # nnx.jit's Python graph traversal per call, as a share of the steady iteration: info
NNX_GRAPH_WARN_SHARE = 0.15  # ... a warning from this share (3x the info line) when the step is passed the
# modules/optimizer themselves (graph nodes, traversed every call) and they are a large graph (the guide's case:
# a small model's traversal is a fixed cost); nnx.cached_partial's remaining Python is info
NNX_GRAPH_WARN_LEAVES = 64  # state leaves (params, optimizer state, rngs) traversed per call


@finding(
    id='nnx-graph-overhead',
    severity='warning / info',
    about='speed',
    threshold="`nnx.jit`'s own Python per call >= 5% of the step (info); a warning from 15% when modules of >= 64 state leaves are passed per call",
    fix='`nnx.cached_partial(train_step, model, optimizer)`, or `nnx.split` once + `jax.jit` on the state',
    tested_by='tests/doctor/test_doctor_public_styles.py',
)
def nnx_graph_overhead(obs: Obs) -> Finding | None:
    """Threshold: ``nnx.jit``'s own Python around the jitted call (splitting the module graph into state and
    merging it back) takes >= 5% of the steady iteration (info), >= 15% (warning)."""
    graph = _per_step(obs, "nnx_graph_s:s")
    cpu = _per_step(obs, "nnx_graph_cpu_s:s") if "nnx_graph_cpu_s:s" in obs.per_step else None
    if graph and cpu is not None:  # its CPU time where less: time the loop's thread spent descheduled or waiting
        graph = min(graph, cpu)  # for the GIL on a busy machine is not the graph's traversal
    nodes = _per_step(obs, "nnx_graph_calls") or 0.0
    leaves = obs.info.nnx_graph_leaves or 0
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
        f"call's return to yours: split and merge of the graph; the loop thread's CPU time in it where less than the "
        f"wall time), {100 * share:.1f}% of the {iter_ms:.2f} ms "
        f"steady iteration; {nodes:.0f} calls per step are passed modules/optimizers, {leaves} state leaves traversed "
        f"on each call (info from {100 * NNX_GRAPH_INFO_SHARE:.0f}%, warning from "
        f"{100 * NNX_GRAPH_WARN_SHARE:.0f}% when modules of >= {NNX_GRAPH_WARN_LEAVES} state leaves are passed per call)",
        "Traverse the graph once, not every call: step = nnx.cached_partial(train_step, model, optimizer) "
        "then step(batch); or the functional style: graphdef, state = nnx.split((model, optimizer)) once, "
        "a jax.jit(step, donate_argnums=(0,)) on (state, batch) that calls nnx.merge(graphdef, state) inside and "
        "returns nnx.state(...), and nnx.update((model, optimizer), state) after the loop.",
        "https://flax.readthedocs.io/en/latest/guides/performance.html", location=_step_location(obs))
