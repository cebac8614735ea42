"""A run's identity is declared once, on the spec's fields (``option(identity=...)``, config.Identity): the run
id, the records' labels and diff's matching all read it. Two specs that differ in a field saying what ran never
share a run id and never match in diff; a condition (threads, flags, cache state) splits run ids but not diff's
matching; a repeat shares its configuration's id; a field that says where things go changes none of them."""

from __future__ import annotations

from dataclasses import fields

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from twinbench import diff
from twinbench.config import Identity, ModelConfig, TrainConfig, choices
from twinbench.record import for_spec, varying
from twinbench.record_sections import NOT_LABELS
from twinbench.spec import FIELDS, ID_FIELDS, IDENTITY, PRESETS, RunSpec, from_preset
from twinbench.spec_sections import NAME_PARTS

#: strategy names of several bases and modifiers (the values of the flat form's ``strategy``)
NAMES = ("eager", "compile", "compile+bf16", "jit", "jit+remat", "scan-steps", "scan-layers+remat", "mesh-fsdp",
         "eager+bucket", "naive")


def _values(name: str, now: object) -> st.SearchStrategy:
    """Values of a spec field's type (its choices where it declares them) other than ``now``."""
    if name == "strategy":
        return st.sampled_from([n for n in NAMES if n != now])
    f, typ = FIELDS[name]
    if choices(f):
        return st.sampled_from([c for c in choices(f) if c != now])
    if typ is bool:
        return st.just(not now)
    if typ is int:
        return st.integers(-1, 4096).filter(lambda v: v != now)
    if typ is float:
        return st.floats(0, 1e3, allow_nan=False).filter(lambda v: v != now)
    return st.text("abcxyz/._-", max_size=8).filter(lambda v: v != now)


@st.composite
def two_specs(draw: st.DrawFn) -> tuple[RunSpec, RunSpec, set[Identity], set[str]]:
    """A preset's spec and the same spec with 1-3 fields changed, the kinds of the fields changed and their names."""
    spec = from_preset(draw(st.sampled_from(list(PRESETS))), framework=draw(st.sampled_from(("torch", "jax"))),
                       strategy=draw(st.sampled_from(NAMES)))
    names = draw(st.lists(st.sampled_from(sorted(ID_FIELDS)), min_size=1, max_size=3, unique=True))
    flat = spec.flat()
    changed = {}
    for name in names:
        now = flat["model"].get(name, flat["train"].get(name, flat.get(name)))
        changed[name] = draw(_values(name, now))
    return spec, spec.evolve(**changed), {IDENTITY[n] for n in names}, set(names)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(two_specs())
def test_specs_differing_in_what_ran_never_share_a_run_id_nor_match_in_diff(case):
    a, b, kinds, names = case
    ra, rb = for_spec(a, "ok"), for_spec(b, "ok")
    identifies = kinds - {Identity.NONE}
    assert (a.run_id() != b.run_id()) == bool(identifies)
    assert (a.config_id() != b.config_id()) == bool(identifies - {Identity.REPEAT})
    assert (diff.identity(ra) != diff.identity(rb)) == (Identity.CONFIG in kinds)
    if "precision" not in names:  # the labels say precision by +bf16, which with_precision adds to the name
        vary = varying([ra, rb])
        assert (ra.label(vary) != rb.label(vary)) == bool(identifies)


def test_every_field_of_the_spec_declares_its_identity_and_each_reader_follows_it():
    every = [f.name for cls in (ModelConfig, TrainConfig) for f in fields(cls)]
    assert set(every) <= set(ID_FIELDS) and not set(NAME_PARTS) & set(ID_FIELDS)
    assert set(IDENTITY.values()) == set(Identity)  # every kind is used by some field
    for name, kind in IDENTITY.items():
        assert (name in diff.MATCH_FIELDS) == (kind is Identity.CONFIG), name
        if name not in ("framework", "strategy"):  # the label's name says these two
            assert (name in NOT_LABELS) == (kind is Identity.NONE), name
    # the fields diff left out before the mark (runs differing only there were pooled as repeats)
    assert {"remat_policy", "scan_k", "scan_unroll", "splash_layout", "mlp_activation",
            "optimizer_state"} <= set(diff.MATCH_FIELDS)
