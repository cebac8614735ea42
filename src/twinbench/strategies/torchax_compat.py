"""Import torchax on a PyTorch that removed named tensors: a small, guarded compatibility layer.

torchax 0.0.13 (the release on PyPI) refers to named-tensor ATen overloads such as
``torch.ops.aten.prod.dim_Dimname`` in two module-level tables: its autocast policy (``torchax.amp``, read
at import) and its decomposition list (``torchax.decompositions``, read when the default environment is
built). PyTorch 2.13 removed named tensors and those overloads with them, so ``import torchax`` fails with
``AttributeError: The underlying op of 'aten.prod' has no overload name 'dim_Dimname'`` (reported to
google/torchax as #101 and fixed upstream by #102, after 0.0.13).

:func:`import_torchax` imports torchax (and its decomposition table) while a missing *named-tensor*
overload (``Dimname`` or ``names`` in its overload name) resolves to an inert placeholder instead of raising,
and builds torchax's default environment under the same guard.
A placeholder is never a real operator: as an autocast-policy key it matches no call, and
``torch._decomp.get_decompositions`` ignores what is not an operator, which is exactly what the upstream
fix does (drop those entries). Any other missing overload still raises. The patch is installed only when
the PyTorch in use lacks ``aten.prod.dim_Dimname``, only acts on a lookup that would otherwise raise, and is
removed again at once: an older PyTorch, or a torchax that no longer refers to removed overloads, is
imported untouched.

torchax 0.0.13's autocast (``torchax.amp.autocast``) casts by a policy keyed on ATen operators, but torchax runs
``F.linear`` and ``F.scaled_dot_product_attention`` at the torch-function level, before ATen: under its autocast a
Linear layer stays fp32 while ``x @ w`` turns bf16. :func:`import_torchax` adds those two functions to the policy
with the class their ATen forms have there (lower precision), so bf16 autocast means what ``torch.autocast`` means.
Its "promote" policy (``cat``, ``stack``: run in the widest dtype of the inputs) reads ``.dtype`` of every
positional argument, so ``torch.cat([a, b], dim=-1)`` under autocast raises ``AttributeError: 'list' object has
no attribute 'dtype'``; the promotion is taken over the floating-point tensors among the arguments instead.

torchax runs the module's Python code on JAX tracers, so a value the code reads in a Python ``if`` (``bool(t)``,
``x in t``, ``t.item()``) cannot be answered (``ConcretizationTypeError``). Libraries keep such checks out of
compiled code behind ``torch.compiler.is_compiling()`` (torch.export sets it while it traces a module in Python,
as torchax does): transformers 4.x's padding warning and its all-ones-mask shortcut, for example, look at the
token and mask values unless it is true. :func:`traced_as_compiled` makes it true while torchax traces the step,
so every such check of any library version steps aside; what the step computes does not change.

torchax changes global torch settings when imported (it disables the MHA fast path, renames the
``privateuse1`` backend to ``jax`` and registers a device module), so only the JAX worker of a
``--model`` run imports it, never a PyTorch measurement process.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
from collections.abc import Iterator
from types import ModuleType
from typing import Any

#: What this layer patched at the last :func:`import_torchax` (for tests and the record): overload names.
PATCHED: list[str] = []


class RemovedOverload:
    """Stands for an ATen overload that this PyTorch no longer has; equal only to itself."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<removed overload {self.name}>"


def is_named_tensor_overload(key: str) -> bool:
    """The overload names of named-tensor variants: ``dim_Dimname``, ``dimname_out``, ``Dimname_Scalar``
    (a ``Dimname`` argument) and ``names_dim``, ``names_ScalarOpt_dim``, ``correction_names`` (a ``names``
    argument). torchax 0.0.13 refers to 21 of them, all missing from torch 2.13."""
    return "dimname" in key.lower() or "names" in key.lower().split("_")


def needs_patch() -> bool:
    """True when this PyTorch has dropped the named-tensor overloads torchax 0.0.13 refers to."""
    import torch

    try:
        torch.ops.aten.prod.dim_Dimname  # noqa: B018 (the probe is the attribute access)
    except AttributeError:
        return True
    return False


@contextlib.contextmanager
def tolerate_removed_named_overloads() -> Iterator[list[str]]:
    """While active, ``torch.ops.aten.X.<named-tensor overload>`` that does not exist gives a placeholder.

    Yields the list of overload names that were replaced. The class attribute is restored on exit.
    """
    import torch

    packet = torch._ops.OpOverloadPacket
    original = packet.__getattr__
    replaced: list[str] = []

    def __getattr__(self: Any, key: str) -> Any:
        try:
            return original(self, key)
        except AttributeError:
            if not is_named_tensor_overload(key):
                raise
            replaced.append(f"{self}.{key}")
            return RemovedOverload(f"{self}.{key}")

    packet.__getattr__ = __getattr__  # type: ignore[method-assign]
    try:
        yield replaced
    finally:
        packet.__getattr__ = original  # type: ignore[method-assign]


def autocast_torch_functions() -> list[str]:
    """Put the torch functions torchax lowers before ATen (``F.linear``, ``F.scaled_dot_product_attention``)
    into its autocast policy as lower-precision ops, as their ATen forms are; return the names added."""
    import torch
    import torch.nn.functional as F
    from torchax import amp

    added = []
    for fn, aten in ((F.linear, "linear"), (F.scaled_dot_product_attention, "scaled_dot_product_attention")):
        policy = amp.autocast_policy.get(getattr(torch.ops.aten, aten).default)
        if fn not in amp.autocast_policy and policy is not None:
            amp.autocast_policy[fn] = policy
            added.append(fn.__name__)
    return added


def promote_over_tensors() -> None:
    """torchax's autocast "promote" policy over the floating-point tensors of the arguments (lists included),
    as ``torch.autocast`` promotes, instead of over every positional argument."""
    import torch
    from torch.utils import _pytree as pytree
    from torchax import amp

    original = amp.execute_policy
    if getattr(original, "promotes_over_tensors", False):
        return

    def is_float(a: Any) -> bool:
        return isinstance(a, torch.Tensor) and a.is_floating_point()

    def execute_policy(policy: Any, args: Any, kwargs: Any, target_lower_fp: Any) -> Any:
        if policy is not amp.CastPolicy.PROMOTE:
            return original(policy, args, kwargs, target_lower_fp)
        floats = [a for a in pytree.tree_leaves((args, kwargs)) if is_float(a)]
        if not floats:
            return args, kwargs
        widest = max(floats, key=lambda a: a.dtype.itemsize).dtype
        return pytree.tree_map_only(is_float, lambda a: a.to(widest), (args, kwargs))

    execute_policy.promotes_over_tensors = True  # type: ignore[attr-defined]
    amp.execute_policy = execute_policy


def fix_autocast() -> None:
    """The two autocast fixes above (torch functions in the policy, promotion over tensors)."""
    autocast_torch_functions()
    promote_over_tensors()


@contextlib.contextmanager
def lowered(env: Any, fn: Any, lowering: Any, *, is_jax_function: bool, fp32_under_autocast: bool = False
            ) -> Iterator[None]:
    """While active, torchax lowers the torch function ``fn`` to ``lowering`` (a JAX function, or one on torch
    tensors that torchax traces: ``is_jax_function``); ``fp32_under_autocast``: torchax's autocast runs it in
    fp32, as ``torch.autocast`` does. torchax's own lowering and policy are put back on exit."""
    from torchax import amp
    from torchax.ops import ops_registry

    ops = env._ops  # torchax 0.0.13 keeps torch-function lowerings here (Environment.override_op_definition)
    saved = [(ops, ops.get(fn))]
    ops[fn] = ops_registry.Operator(fn, lowering, is_jax_function=is_jax_function, is_user_defined=True,
                                    needs_env=False, is_view_op=False)
    if fp32_under_autocast:
        saved.append((amp.autocast_policy, amp.autocast_policy.get(fn)))
        amp.autocast_policy[fn] = amp.CastPolicy.FP32
    try:
        yield
    finally:
        for table, before in saved:
            if before is None:
                table.pop(fn, None)
            else:
                table[fn] = before


@contextlib.contextmanager
def traced_as_compiled() -> Iterator[None]:
    """While active, ``torch.compiler.is_compiling()`` is True: the module's code is being traced into one
    program, and its data-dependent Python checks (warnings, shortcuts on the values) are skipped as under
    ``torch.compile``. The function is put back on exit."""
    import torch.compiler

    original = torch.compiler.is_compiling
    torch.compiler.is_compiling = lambda: True  # type: ignore[assignment]
    try:
        yield
    finally:
        torch.compiler.is_compiling = original  # type: ignore[assignment]


def import_torchax() -> ModuleType:
    """``import torchax`` (plus its decomposition table), patched only where this PyTorch needs it."""
    if "torchax" in sys.modules and "torchax.decompositions" in sys.modules:
        return sys.modules["torchax"]
    if not needs_patch():
        torchax = importlib.import_module("torchax")
        importlib.import_module("torchax.decompositions")
        torchax.default_env()
        fix_autocast()
        return torchax
    for name in [m for m in sys.modules if m == "torchax" or m.startswith("torchax.")]:
        del sys.modules[name]  # a half-imported torchax from a failed plain import
    with tolerate_removed_named_overloads() as replaced:
        torchax = importlib.import_module("torchax")
        importlib.import_module("torchax.decompositions")  # read lazily by default_env(): load it now
        torchax.default_env()  # loads torchax.ops.* and the decomposition table
    PATCHED[:] = replaced
    fix_autocast()
    return torchax
