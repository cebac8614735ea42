"""The claims a user's own model (``claims --model``) can be tested on, and in one line why the others need a twin.

A claim whose experiment takes any model (steady speed against ``torch.compile``, the size ladder, the per-device
batch of data parallelism) runs its runs on the user's module instead of the GPT twin: the torch strategies keep
their names, the JAX twin's are read as the user model's JAX side (``jit`` -> ``torchax``, ``mesh-dp`` ->
``torchax-mesh-dp``; with ``--jax-model`` the user's port: ``port``, ``port-mesh-dp``). The preset shapes the
user's ``build(cfg)`` as it shapes a twin. The other claims measure something only the twins have (scanned
steps or layers, pmap, padding of variable-length text, the mask implementations, twinbench's input pipeline,
probes on its own examples): each says so in one line.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from twinbench.spec import RunSpec, SpecError

if TYPE_CHECKING:
    from twinbench.plan import Overrides, RunFields

#: Claims whose experiment takes any model.
ANY_MODEL = ("C6", "C7", "C8", "C12")
#: Why each other claim needs a twin (one line each).
NEEDS_TWIN: dict[str, str] = {
    "C1": "its experiment is BERT fine-tuning on variable-length text (eager+dynamic against naive+dynamic)",
    "C2": "it measures scan-steps (K steps per lax.scan call), which runs the twins only",
    "C3": "it pads and buckets variable-length text (+bucket, +dynamic) and probes tracing on twinbench's examples",
    "C4": "it compares jit with scan-layers (the twin's blocks stacked and scanned)",
    "C5": "its break-even includes scan-steps, which runs the twins only",
    "C9": "it compares bf16 in both frameworks, and JAX +bf16 runs the twins only",
    "C10": "+replicate-batch (the anti-pattern it plants) is a modifier of the twins' mesh-dp",
    "C11": "it compares mesh-dp with pmap, which runs the twins only",
    "C13": "it plants pmap+nosync, which runs the twins only",
    "C14": "no run can measure it (maturity and style are judgements)",
    "C15": "it needs twinbench's input pipeline (+prefetch, --slow-input, tokenised text)",
    "C16": "it needs twinbench's input pipeline (--slow-input, tokenised text)",
    "C17": "it compares the twin's attention-mask implementations (--mask-impl)",
    "C18": "it pads variable-length text (+pad-max, +bucket, +dynamic)",
    "C19": "its evidence is a probe of custom ops on twinbench's own examples",
    "C20": "it compares remat in both frameworks, and JAX +remat runs the twins only",
    "C21": "its evidence is a probe of printing inside jit on twinbench's own examples",
    "C22": "it measures jax/jit, which builds a twin's NNX model, against the PyTorch path",
}


def tpu_reason(claim_id: str, setup: Any) -> str:
    """On a TPU a user model's torch side runs through torchax, and so does its JAX side without ``--jax-model``:
    a claim setting the two against each other would compare a run with itself (one line, "" otherwise)."""
    top = setup.top
    if setup.platform != "tpu" or not top.user_model or top.user_jax_model or claim_id not in ("C7", "C8"):
        return ""
    return (f"not measurable on a TPU without --jax-model: {claim_id} sets your model's torch side against its JAX "
            "side, and on a TPU both are your module through torchax (jax:torchax); give your port with --jax-model")


def jax_name(strategy: str, port: bool) -> str:
    """A twin's JAX strategy as the user model's JAX side (``jit+x`` -> ``torchax+x``, ``mesh-dp`` ->
    ``torchax-mesh-dp``; with a port: ``port``, ``port-mesh-dp``)."""
    base, *mods = strategy.split("+")
    side = "port" if port else "torchax"
    base = side if base == "jit" else f"{side}-{base}" if base in ("mesh-dp", "mesh-fsdp") else base
    return "+".join([base, *mods])


def _same(strategy: str, port: bool) -> str:
    return strategy


#: a twin's strategy as the user model's, by framework (the torch side runs the user's module unchanged)
SIDE_NAMES = {"jax": jax_name}


def split(claims: list[Any]) -> tuple[list[Any], list[str]]:
    """The claims a user model can run, and one line for each of the others; SpecError if none can run."""
    runnable = [c for c in claims if c.id in ANY_MODEL]
    lines = [f"{c.id} needs a twin: {NEEDS_TWIN.get(c.id, 'its experiment is built on the twins')}"
             for c in claims if c.id not in ANY_MODEL]
    if not runnable:
        raise SpecError(f"--model: none of {', '.join(c.id for c in claims)} can take a user model "
                        f"({lines[0] if len(lines) == 1 else 'each needs a twin'}); those that can: "
                        f"{', '.join(ANY_MODEL)}")
    return runnable, lines


def user_spec(framework: str, strategy: str, preset: str, over: Overrides, top: RunFields) -> RunSpec:
    """A claim's run on the user's model (``top`` holds ``user_model`` and maybe ``user_jax_model``): the
    recipe of ``compare --model``."""
    from twinbench.byo.plan import build_specs

    name = SIDE_NAMES.get(framework, _same)(strategy, bool(top.user_jax_model))
    return build_specs(preset, [framework], [name], dict(over), **top.kwargs())[0]
