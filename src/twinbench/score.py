"""``twinbench score``: is a migrated model numerically the same model in both frameworks?

The parent (this module, imported by the CLI) reads a local Hugging Face GPT-2 checkpoint's config, cuts a
text file into consecutive non-overlapping windows of the model's context length (byte-level tokens, or a
local ``tokenizer.json`` through the ``tokenizers`` library; a final partial window is dropped) and saves
them to a temporary directory. Each framework then runs in its own fresh process (``python -m
twinbench.score``, spawned by ``runner.run_module``): it loads the checkpoint into its twin, computes the
mean next-token cross-entropy of every window in float32 (the ``T - 1`` predictions inside a window, as
Hugging Face's ``labels=input_ids`` loss does) and saves the per-window losses and the logits of the first
window(s). The parent never imports a framework: it compares the saved arrays (largest absolute logit
difference, largest per-window loss difference) and reports.
"""

from __future__ import annotations

import math
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from twinbench.models.options import ModelOptions
from twinbench.spec import FRAMEWORKS, ModelConfig, SpecError

MODULE = "twinbench.score"


# -------------------------------------------------------------------------------------------- parent
def tokenize(data: str | Path, tokenizer: str | Path | None = None) -> np.ndarray:
    """Token ids (int64) of a UTF-8 text file: its bytes, or the ids of a local ``tokenizer.json``."""
    from twinbench.data.text import read_text_file

    raw = read_text_file(data, 1)
    if not tokenizer:
        return raw.astype(np.int64)
    tok_path = Path(tokenizer)
    if not tok_path.is_file():
        raise SpecError(f"--tokenizer {tokenizer}: no such file (give a tokenizer.json)")
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise SpecError("--tokenizer needs the `tokenizers` package: pip install tokenizers") from None
    try:
        tok = Tokenizer.from_file(str(tok_path))
    except Exception as e:  # not a tokenizers JSON file
        raise SpecError(f"--tokenizer {tokenizer}: not a tokenizer.json the tokenizers library reads ({e})") from None
    ids = tok.encode(raw.tobytes().decode("utf-8"), add_special_tokens=False).ids
    return np.asarray(ids, dtype=np.int64)


def cut_windows(tokens: np.ndarray, context: int, max_windows: int = 0) -> np.ndarray:
    """Consecutive non-overlapping windows ``[n, context]``; the final partial window is dropped."""
    n = len(tokens) // context
    if max_windows:
        n = min(n, max_windows)
    return tokens[: n * context].reshape(n, context)


def prepare(init_from: str, data: str, tokenizer: str | None, max_windows: int) -> tuple[ModelConfig, np.ndarray]:
    """Validate the inputs (one-line :class:`SpecError`s) and return the model config and the windows."""
    from twinbench.models.hf import FLAG, check_weights, config_from_hf

    cfg = config_from_hf(init_from)
    from twinbench.models.family import FAMILIES
    from twinbench.tasks import TASKS

    if not TASKS[FAMILIES[cfg.family].task].next_token:  # perplexity needs a prediction at every token
        lm = ", ".join(f.hf.model_type for f in FAMILIES.values() if TASKS[f.task].next_token and f.hf)
        raise SpecError(f"{FLAG} {init_from}: score needs a language-model checkpoint (model_type {lm}), "
                        f"this one is {cfg.family}")
    if max_windows < 0:
        raise SpecError(f"--max-windows must be >= 0 (0: all), got {max_windows}")
    check_weights(init_from)  # the children read it: missing, truncated or foreign weights are one line here
    tokens = tokenize(data, tokenizer)
    if len(tokens) < cfg.context:
        raise SpecError(f"--data {data}: {len(tokens)} tokens make no full window of the model's context "
                        f"{cfg.context}; give a longer file")
    if tokens.max() >= cfg.vocab:
        what = f"--tokenizer {tokenizer}" if tokenizer else "byte-level tokens"
        raise SpecError(f"{what}: token id {int(tokens.max())} is outside the checkpoint's vocab_size {cfg.vocab}"
                        + ("" if tokenizer else "; give the model's tokenizer.json with --tokenizer"))
    return cfg, cut_windows(tokens, cfg.context, max_windows)


class Scored(msgspec.Struct, kw_only=True, frozen=True):
    """Where and how long a framework's child scored the windows."""

    seconds: float = 0.0  # the scoring loop, compile included
    device: str = ""
    platform: str = ""
    matmul_precision: str = ""
    versions: dict[str, str] = {}


class ChildResult(Scored, kw_only=True, frozen=True):
    """What a scoring child writes (``TMPDIR/FRAMEWORK.json``); its first windows' logits beside it (.npy)."""

    window_losses: list[float]
    threads: int = 0


class FrameworkScore(msgspec.Struct, kw_only=True, frozen=True, omit_defaults=True):
    """One framework's score: its mean cross-entropy (nats), perplexity, bits per token and where it ran, or
    why it failed (the other fields then absent)."""

    status: str  # ok or failed
    error: str | None = None
    loss: float | None = None
    perplexity: float | None = None
    bits_per_token: float | None = None
    threads: int | None = None
    seconds: float | None = None
    device: str | None = None
    platform: str | None = None
    matmul_precision: str | None = None
    versions: dict[str, str] | None = None


class ScoreResult(msgspec.Struct, kw_only=True, frozen=True, omit_defaults=True):
    """``twinbench score``'s answer (``--json``): the checkpoint and data, each framework's score, and with two
    frameworks how far their logits and losses are apart (absent with one)."""

    checkpoint: str
    data: str
    tokenizer: str  # the tokenizer.json, or "bytes"
    context: int
    vocab: int
    layers: int
    d_model: int
    windows: int
    tokens_scored: int
    batch: int
    precision: str
    frameworks: dict[str, FrameworkScore]
    compared_windows: int  # windows whose logits are compared
    max_logit_diff: float | None = None
    max_abs_logit: float | None = None
    logits_compared: int | None = None
    max_window_loss_diff: float | None = None
    loss_diff: float | None = None


def score(init_from: str, data: str, frameworks: list[str], tokenizer: str | None = None, batch: int = 4,
          max_windows: int = 0, compare_windows: int = 1, timeout: float = 900.0) -> ScoreResult:
    """Score the checkpoint in each framework (one process each); return the summary (see module doc)."""
    from twinbench import runner

    for fw in frameworks:
        if fw not in FRAMEWORKS:
            raise SpecError(f"--framework: unknown value {fw!r}; allowed: {', '.join(FRAMEWORKS)}")
    if not frameworks:
        raise SpecError(f"--framework: nothing selected; allowed: {', '.join(FRAMEWORKS)}")
    if batch <= 0:
        raise SpecError(f"--batch must be a positive integer, got {batch}")
    if compare_windows <= 0:
        raise SpecError(f"--compare-windows must be a positive integer, got {compare_windows}")
    cfg, windows = prepare(init_from, data, tokenizer, max_windows)
    k = min(compare_windows, batch, len(windows))
    scores: dict[str, FrameworkScore] = {}
    result = ScoreResult(
        checkpoint=str(init_from), data=str(data), tokenizer=str(tokenizer) if tokenizer else "bytes",
        context=cfg.context, vocab=cfg.vocab, layers=cfg.layers, d_model=cfg.d_model,
        windows=len(windows), tokens_scored=len(windows) * (cfg.context - 1), batch=batch,
        precision="fp32", frameworks=scores, compared_windows=k,
    )
    with tempfile.TemporaryDirectory(prefix="twinbench-score-") as tmp:
        np.save(Path(tmp, "windows.npy"), windows.astype(np.int32))
        logits: dict[str, np.ndarray] = {}
        losses: dict[str, np.ndarray] = {}
        for fw in frameworks:
            code, reason = runner.run_module(MODULE, [fw, str(init_from), tmp, str(batch), str(k)], timeout)
            res_path = Path(tmp, f"{fw}.json")
            if code != 0 or not res_path.exists():
                scores[fw] = FrameworkScore(status="failed", error=reason or f"exit code {code}")
                continue
            res = msgspec.json.decode(res_path.read_bytes(), type=ChildResult)  # our own child's file
            losses[fw] = np.asarray(res.window_losses, dtype=np.float64)
            logits[fw] = np.load(Path(tmp, f"{fw}.logits.npy"))
            mean = float(losses[fw].mean())
            scores[fw] = FrameworkScore(status="ok", loss=mean, perplexity=math.exp(min(mean, 700.0)),
                                        bits_per_token=mean / math.log(2), threads=res.threads, seconds=res.seconds,
                                        device=res.device, platform=res.platform,
                                        matmul_precision=res.matmul_precision, versions=res.versions)
        if len(logits) == 2:
            a, b = (logits[fw] for fw in frameworks)
            la, lb = (losses[fw] for fw in frameworks)
            result = msgspec.structs.replace(
                result, max_logit_diff=float(np.max(np.abs(a.astype(np.float64) - b))),
                max_abs_logit=float(np.max(np.abs(a))), logits_compared=int(a.size),
                max_window_loss_diff=float(np.max(np.abs(la - lb))), loss_diff=abs(float(la.mean()) - float(lb.mean())))
    return result


def table(result: ScoreResult, init_from: Path | str) -> Any:
    """The terminal table of :func:`score`'s result (rich): each framework's loss, perplexity, bits/token, time."""
    from rich.table import Table

    table = Table(header_style="bold", title=f"twinbench score: {init_from}")
    for c in ("framework", "mean CE (nats)", "perplexity", "bits/token", "seconds (incl. compile)", "device"):
        table.add_column(c, justify="left" if c in ("framework", "device") else "right")
    for fw, r in result.frameworks.items():
        if r.status != "ok":
            table.add_row(fw, "[red]failed[/]", "", "", "", r.error)
            continue
        table.add_row(fw, f"{r.loss:.6f}", f"{r.perplexity:.3f}", f"{r.bits_per_token:.4f}",
                      f"{r.seconds:.2f}", f"{r.device} ({r.platform})")
    return table


# --------------------------------------------------------------------------------------------- child
def _run_torch(cfg: ModelConfig, weights: dict[str, np.ndarray], windows: np.ndarray, batch: int,
               k: int) -> tuple[np.ndarray, np.ndarray, Scored]:
    import torch
    import torch.nn.functional as F

    from twinbench.measure.device import describe, set_fp32_matmul, torch_device, versions
    from twinbench.models.family import by_name
    from twinbench.models.weights import canonical_to_torch

    torch.set_num_threads(len(os.sched_getaffinity(0)))
    precision = set_fp32_matmul("torch")
    dev = torch_device()
    model = by_name(cfg.family).torch_model(cfg, ModelOptions())
    canonical_to_torch(model, weights)
    model.to(dev).eval()

    def forward(x_np: np.ndarray) -> tuple[Any, Any]:
        x = torch.from_numpy(x_np).to(dev).long()
        logits = model(x).float()
        ce = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1), reduction="none")
        return logits[:k], ce.view(x.shape[0], -1).mean(dim=1)

    with torch.inference_mode():
        first, losses, seconds = _loop(forward, windows, batch, lambda t: t.cpu().numpy())
    platform, name, _ = describe("torch")
    return first, losses, Scored(seconds=seconds, device=name, platform=platform, matmul_precision=precision,
                                 versions={k: str(v) for k, v in versions("torch").items()})  # torch.__version__ is a str subclass msgspec does not encode


def _run_jax(cfg: ModelConfig, weights: dict[str, np.ndarray], windows: np.ndarray, batch: int,
             k: int) -> tuple[np.ndarray, np.ndarray, Scored]:
    import jax.numpy as jnp
    import optax
    from flax import nnx

    from twinbench.measure.device import describe, set_fp32_matmul, versions
    from twinbench.models.family import by_name
    from twinbench.models.weights import canonical_to_jax

    precision = set_fp32_matmul("jax")
    model = by_name(cfg.family).jax_model(cfg, ModelOptions(), nnx.Rngs(0))
    canonical_to_jax(model, weights)

    @nnx.jit
    def forward_jit(model: Any, x: Any) -> tuple[Any, Any]:
        logits = model(x).astype(jnp.float32)
        ce = optax.softmax_cross_entropy_with_integer_labels(logits[:, :-1], x[:, 1:]).mean(axis=1)
        return logits[:k], ce

    first, losses, seconds = _loop(lambda x: forward_jit(model, jnp.asarray(x)), windows, batch, np.asarray)
    platform, name, _ = describe("jax")
    return first, losses, Scored(seconds=seconds, device=name, platform=platform, matmul_precision=precision,
                                 versions={k: str(v) for k, v in versions("jax").items()})


def _loop(forward: Any, windows: np.ndarray, batch: int, to_host: Any) -> tuple[np.ndarray, np.ndarray, float]:
    """Per-window losses over every window, and the logits of the first batch's first windows.

    The last batch is padded with copies of its last window (their losses dropped), so every call has one
    shape and a compiling framework compiles once.
    """
    start = time.perf_counter()
    losses, first = [], None
    for i in range(0, len(windows), batch):
        x = windows[i:i + batch]
        n = len(x)
        if n < batch:
            x = np.concatenate([x, np.repeat(x[-1:], batch - n, axis=0)])
        logits, ce = forward(x)
        losses.append(to_host(ce)[:n])  # host copy: waits for the device
        if first is None:
            first = to_host(logits)
    assert first is not None
    return first, np.concatenate(losses), time.perf_counter() - start


#: each framework's scoring loop, by the framework the parent names
RUNS = {"torch": _run_torch, "jax": _run_jax}


def main(argv: list[str]) -> int:
    """Child: ``python -m twinbench.score FRAMEWORK CHECKPOINT TMPDIR BATCH K``."""
    from twinbench.lifeline import watch_parent

    watch_parent()  # end with the runner, even when it is killed with SIGKILL
    fw, ckpt, tmp, batch, k = argv[0], argv[1], Path(argv[2]), int(argv[3]), int(argv[4])
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        from twinbench.models.hf import load_hf

        cfg, weights = load_hf(ckpt)
        windows = np.load(tmp / "windows.npy")
        first, losses, info = RUNS[fw](cfg, weights, windows, batch, k)
    except Exception as e:
        traceback.print_exc()
        print(f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0]}"[:500], file=sys.stderr)
        return 1
    if not np.all(np.isfinite(losses)):
        print(f"FloatingPointError: non-finite loss in window {int(np.argmin(np.isfinite(losses)))}", file=sys.stderr)
        return 1
    np.save(tmp / f"{fw}.logits.npy", first.astype(np.float32))
    child = ChildResult(window_losses=losses.tolist(), threads=_threads(), **msgspec.structs.asdict(info))
    (tmp / f"{fw}.json").write_bytes(msgspec.json.encode(child))
    return 0


def _threads() -> int:
    return len(os.sched_getaffinity(0))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
