"""The printed form of a prediction: a few lines per strategy, and the --devices table."""

from __future__ import annotations

from twinbench.predict.command import Prediction


def _gib(b: float) -> str:
    return f"{b / 2**30:.2f} GiB" if b >= 2**28 else f"{b / 2**20:.1f} MiB"


def _ms(ms: float) -> str:
    return f"{ms:.1f}" if ms >= 10 else f"{ms:.3g}"


def error_text(pred: Prediction) -> str:
    """How far predictions of this kind were from measured steps, in words."""
    bar = pred.error_bar
    kind = f"{pred.spec.framework} on {pred.sheet.platform}"
    if not bar:
        return f"no measured point of {kind} yet: no error bar (add one with --calibrate)"
    errs = ", ".join(f"{e:+.0%}" for e in bar.errors)
    return f"predictions of {kind} were within {bar.max_abs:.0%} of {bar.n} measured step(s) ({errs})"


def render(pred: Prediction) -> str:
    """One strategy's prediction: step, MFU, memory, the dominant ops, the error bar, the devices curve."""
    s, sheet = pred.spec, pred.sheet
    lines = [f"{s.framework} {s.strategy.name} {s.preset} {s.train.batch}x{s.train.seq}"
             f"{'' if s.strategy.attention_impl == 'default' else ' attention ' + s.strategy.attention_impl} on {sheet.name} "
             f"({sheet.label}): predicted step {_ms(pred.step_ms)} ms, MFU {pred.mfu:.0%}, "
             f"{pred.tokens / (pred.step_ms / 1e3):,.0f} tokens/s"]
    if pred.factor != 1.0:
        lines.append(f"  calibrated: the roofline's {pred.roof.step_ms:.1f} ms x {pred.factor:.2f} (your measured points)")
    lines.append(f"  error bar: {error_text(pred)}")
    kinds = ", ".join(f"{k} {_ms(v)} ms" for k, v in sorted(pred.roof.by_kind().items(), key=lambda kv: -kv[1]))
    lines.append(f"  where the time goes: {kinds}")
    fits = {"yes": "fits", "no": "does NOT fit", "maybe": "may not fit"}[pred.fits]
    low, high = pred.memory_range
    span = "" if low == high else f" (between {_gib(low)} and {_gib(high)})"
    lines.append(f"  memory: ~{_gib(pred.memory_bytes)} needed{span}, {fits} in the {sheet.hbm_usable_gib:.1f} GiB "
                 "usable")
    if pred.memory_error_bar:
        bar = pred.memory_error_bar
        errs = ", ".join(f"{e:+.0%}" for e in bar.errors)
        lines.append(f"  memory error bar: estimates of {s.framework} on {sheet.platform} were within "
                     f"{bar.max_abs:.0%} of {bar.n} measured peak(s) ({errs})")
    lines.append("  dominant ops (all layers together):")
    for label, kind, ms, bound in pred.roof.dominant(6):
        lines.append(f"    {ms:8.3f} ms  {kind:9s} {bound:8s}  {label[:90]}")
    if pred.curve:
        lines.append(f"  data parallel (same per-device batch; all-reduce of {_gib(pred.grad_bytes)} of gradients):")
        lines.append("       N   step ms   all-reduce ms   speed-up   link")
        for p in pred.curve:
            lines.append(f"    {p.devices:4d}  {_ms(p.step_ms):>8s}  {p.allreduce_ms:14.3f}  {p.speedup:8.2f}x   {p.link}")
    lines += [f"  note: {n}" for n in pred.notes]
    return "\n".join(lines)
