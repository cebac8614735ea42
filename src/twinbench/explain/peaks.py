"""The bf16 matmul peak of an accelerator from its datasheet, for a trace that comes with no measured peak.

A run's record carries its framework's *measured* peak (``peak_tflops``), and explain prefers it; a profile
read on its own names only its device (``device_type_string`` on a TPU plane). This lookup is the
datasheet figure per device kind; it belongs with the measured peaks in ``twinbench.measure.peak`` and should
be answered from there once that module keys its datasheet peaks on the device kind.
"""

from __future__ import annotations

import re

#: (pattern on the device kind, bf16 dense TFLOP/s per chip, its name) from the vendors' datasheets
_DATASHEET = [
    (r"v5\s*lite|v5e", 197.0, "TPU v5e"),
    (r"v6\s*lite|v6e", 918.0, "TPU v6e"),
    (r"v5p|v5(?!\s*lite)", 459.0, "TPU v5p"),
    (r"v4", 275.0, "TPU v4"),
]


def datasheet_tflops(device_kind: str) -> tuple[float | None, str]:
    """(bf16 TFLOP/s, where the figure comes from) of a device kind (``TPU v5 lite``); (None, "") if unknown."""
    for pattern, tflops, name in _DATASHEET:
        if re.search(pattern, device_kind, re.IGNORECASE):
            return tflops, f"{name} datasheet bf16 peak"
    return None, ""
