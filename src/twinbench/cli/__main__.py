"""``python -m twinbench.cli``."""

import sys

from twinbench.cli import app

sys.exit(app())
