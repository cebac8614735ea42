"""Work dispatched outside the compiled step: ``jax-eager-ops``."""

from __future__ import annotations

from twinbench.doctor.findings.base import JAX_DOCS, Finding, Obs, _per_step, finding
from twinbench.doctor.observations import EagerFunction, EagerWork

# -- jax-eager-ops -----------------------------------------------------------------------------------------
EAGER_OPS_WARN = 20  # primitives dispatched one by one outside jit, per steady step
EAGER_OPTAX_WARN = 0.5  # Optax updates run outside jit, per steady step


TEMPLATE = ("Put the whole step, optimizer update included, inside one jitted function:\n"
            "  @jax.jit\n"
            "  def train_step(params, opt_state, batch):\n"
            "      loss, grads = jax.value_and_grad(loss_fn)(params, batch)\n"
            "      updates, opt_state = tx.update(grads, opt_state, params)\n"
            "      return optax.apply_updates(params, updates), opt_state, loss\n"
            "(Flax NNX: decorate the step that calls optimizer.update(model, grads) with @nnx.jit.)")


def decorator(fn: EagerFunction) -> str:
    """The jit decorator for the user's function ``fn`` (``eager_step``'s record): its static arguments named."""
    jit = "nnx.jit" if fn.nnx else "jax.jit"
    static = tuple(fn.static)
    return f"@functools.partial({jit}, static_argnames={static!r})" if static else f"@{jit}"


def eager_fix(step: EagerWork | None) -> str:
    """Jit the user's own step function(s), each decorator written for it (its static arguments from the values it
    was called with), or the template where the eager work is not inside a function of one step."""
    funcs = step.functions if step else []
    if not funcs:
        where = step.at if step else ""
        return TEMPLATE + (f"\nThe eager work runs at {where}, outside any function of one step." if where else "")
    head = ("Jit the step so that it runs as one compiled program: put this decorator on the line above "
            + ("each function below" if len(funcs) > 1 else "the function below")
            + (" (the loop itself calls them: each is jitted on its own)" if step and step.loop else "")
            + ":")
    lines = [head]
    for fn in funcs:
        lines += [f"  {fn.file}:{fn.line}", f"  {decorator(fn)}", f"  def {fn.name}({', '.join(fn.params)}):"]
        lines += [f"  ({name}: {why}: it can set array shapes or Python control flow, so jit takes it as static; "
                  "each value it takes compiles once)" for name, why in fn.static.items()]
    imports = {"import functools"} if any(fn.static for fn in funcs) else set()
    imports |= {"from flax import nnx"} if any(fn.nnx for fn in funcs) else {"import jax"}
    lines.append(f"(with {' and '.join(sorted(imports))} at the top of the file; the first call compiles, later "
                 "calls with the same shapes and static values reuse the program)")
    return "\n".join(lines)


@finding(
    id='jax-eager-ops',
    severity='warning',
    about='speed',
    threshold='>= 20 JAX primitives or `jax.Array` operators dispatched outside `jit` per step, or the Optax update run outside `jit` on >= 0.5 of the steps',
    fix='the decorator for your own step function(s) at their `file:line`, with `static_argnames` for the arguments that cannot be traced; `@nnx.jit` for functions given NNX modules',
    example='jax_eager_ops',
)
def jax_eager_ops(obs: Obs) -> Finding | None:
    """Threshold: >= 20 JAX ops dispatched one by one (outside jit) per step, or the Optax update
    run outside jit on at least every other step."""
    ops = _per_step(obs, "eager_ops")
    optax_rate = _per_step(obs, "optax_eager_updates") or 0.0
    if ops is None or (ops < EAGER_OPS_WARN and optax_rate < EAGER_OPTAX_WARN):
        return None
    eager_ms = (_per_step(obs, "eager_s:s") or 0.0) * 1e3
    sources = obs.info.eager_sources
    total = sum(sources.values()) or 1
    src = ", ".join(f"{k} {100 * v / total:.0f}%" for k, v in list(sources.items())[:4])
    optax_eager = optax_rate >= EAGER_OPTAX_WARN
    fix = eager_fix(obs.info.eager_step)
    return Finding(
        "jax-eager-ops", "warning",
        f"{ops:.0f} ops per step run one by one outside jit" + (" (the Optax update among them)" if optax_eager else ""),
        f"{ops:.0f} eager primitive dispatches and jax.Array operators (+ - * / ** @) counted per step (a "
        f"jnp function called outside jit dispatches on a C++ path the count does not see) taking {eager_ms:.2f} ms of a {obs.step_ms or 0:.2f} ms "
        f"step; they come from: {src or 'unknown'}; Optax updates outside jit: {optax_rate:.1f} per step; "
        f"each eager op is a separate dispatch (and its Python-number operands each a host-to-device copy: "
        f"{_per_step(obs, 'h2d_guard') or 0:.0f} per step) (warning from {EAGER_OPS_WARN} eager ops or "
        f"{EAGER_OPTAX_WARN:g} eager Optax updates per step)", fix,
        f"{JAX_DOCS}/jit-compilation.html")
