"""The metrics of one run's record from what the timed loop measured: step-time statistics, throughput,
achieved FLOP/s and MFU (against the measured peak of every device the run used, and the datasheet peak).

Pure arithmetic on numbers: no framework, no model (the model family hands in its FLOPs per token).
"""

from __future__ import annotations

from typing import Any

from twinbench.measure.clock import Timing, percentile
from twinbench.measure.flops import throughput


def step_stats(timing: Timing) -> dict[str, Any]:
    """Median, 10th/90th percentile and mean of the steady steps, and every steady step in order, in ms (a
    K-step call's time already divided by K): ``twinbench diff`` compares runs as samples, not two medians;
    ``step_ms_async``: the unsynchronised window's time per step (None when not measured)."""
    s = timing.step_s
    window = timing.async_step_s
    return {"step_ms": percentile(s, 50) * 1e3, "step_ms_p10": percentile(s, 10) * 1e3,
            "step_ms_p90": percentile(s, 90) * 1e3, "step_ms_mean": sum(s) / len(s) * 1e3,
            "step_times_ms": [round(x * 1e3, 4) for x in s],
            "step_ms_async": window * 1e3 if window is not None else None}


def speed(timing: Timing, tokens_per_step: float, flops_per_token: int, peak_tflops: float | None,
          peak_datasheet: float | None, parallel_peaks: int, datasheet_devices: int) -> dict[str, Any]:
    """tokens/s, achieved TFLOP/s, MFU against ``parallel_peaks`` copies of the measured peak (1 on one
    device) and MFU against the datasheet peak of ``datasheet_devices`` devices."""
    tp = throughput(tokens_per_step, percentile(timing.step_s, 50), flops_per_token, peak_tflops)
    if parallel_peaks > 1:  # MFU against the peak of every device the run used, not of one
        tp["mfu"] = tp["achieved_tflops"] / (peak_tflops * parallel_peaks) if peak_tflops else None
    tp["mfu_datasheet"] = tp["achieved_tflops"] / (peak_datasheet * datasheet_devices) if peak_datasheet else None
    return tp
