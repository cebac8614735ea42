"""What the doctor keeps of a step's jit options goes into a JSON record and is printed back as Python: a
sharding (or any other object) is left out, plain values are kept as given."""

from __future__ import annotations

import json

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from twinbench.doctor.instruments_jax.facts import _plain


def test_shardings_are_left_out_and_plain_options_kept() -> None:
    mesh = Mesh(np.array(jax.devices()[:1]), ("data",))
    options = {"in_shardings": ({"w": NamedSharding(mesh, PartitionSpec())}, NamedSharding(mesh, PartitionSpec())),
               "static_argnums": (2,), "static_argnames": ["n"], "donate_argnums": 0, "inline": None}
    kept = {k: v for k, v in options.items() if _plain(v)}
    assert set(kept) == {"static_argnums", "static_argnames", "donate_argnums", "inline"}
    assert json.loads(json.dumps(kept))["static_argnums"] == [2]
