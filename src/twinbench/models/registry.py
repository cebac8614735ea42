"""The built-in model families by name, in registration order; filled by ``family.register`` (one line per
family in ``models/__init__.py``).

Its own module, importing nothing of twinbench, so that ``weights.py`` can ask every family for its layout
(linear suffixes, layer lists) while ``family.py`` uses ``weights.py``'s converters: no import cycle.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from twinbench.models.family import Family

FAMILIES: dict[str, Family] = {}
