"""nnx_jit_deep.py fixed the way the doctor says: nnx.cached_partial traverses the graph once."""

import sys
from pathlib import Path

src = Path(__file__).with_name("nnx_jit_deep.py").read_text().replace(
    "for _step in range(200):\n    loss = train_step(model, optimizer, X)",
    "step_fn = nnx.cached_partial(train_step, model, optimizer)\nfor _step in range(200):\n    loss = step_fn(X)")
sys.argv[0] = __file__
exec(compile(src, __file__, "exec"), {"__name__": "__main__"})
