"""The metrics of one run's record from what the timed loop measured: step-time statistics, throughput,
achieved FLOP/s and MFU (against the measured peak of every device the run used, and the datasheet peak).

Pure arithmetic on numbers: no framework, no model (the model family hands in its FLOPs per token).
"""

from __future__ import annotations

from dataclasses import dataclass

from twinbench.measure.clock import Timing, percentile


@dataclass(frozen=True)
class StepStats:
    """The steady steps' times in ms (a K-step call's time already divided by K): the record's timing section."""

    step_ms: float
    step_ms_p10: float
    step_ms_p90: float
    step_ms_mean: float
    step_times_ms: list[float]  # every steady step in order: ``twinbench diff`` compares runs as samples
    step_ms_async: float | None  # the unsynchronised window's time per step (None when not measured)


@dataclass(frozen=True)
class Speed:
    """Throughput, achieved FLOP/s and MFU: the record's speed section's measured part."""

    tokens_per_s: float
    achieved_tflops: float
    mfu: float | None  # against the measured peak of every device the run used (None: no peak)
    mfu_datasheet: float | None  # against the datasheet peak (None: no datasheet)


def step_stats(timing: Timing) -> StepStats:
    """Median, 10th/90th percentile and mean of the steady steps, and every steady step in order, in ms."""
    s = timing.step_s
    window = timing.async_step_s
    return StepStats(step_ms=percentile(s, 50) * 1e3, step_ms_p10=percentile(s, 10) * 1e3,
                     step_ms_p90=percentile(s, 90) * 1e3, step_ms_mean=sum(s) / len(s) * 1e3,
                     step_times_ms=[round(x * 1e3, 4) for x in s],
                     step_ms_async=window * 1e3 if window is not None else None)


def speed(timing: Timing, tokens_per_step: float, flops_per_token: int, peak_tflops: float | None,
          peak_datasheet: float | None, parallel_peaks: int, datasheet_devices: int) -> Speed:
    """tokens/s, achieved TFLOP/s, MFU against ``parallel_peaks`` copies of the measured peak (1 on one
    device) and MFU against the datasheet peak of ``datasheet_devices`` devices."""
    tokens_per_s = tokens_per_step / percentile(timing.step_s, 50)
    achieved = tokens_per_s * flops_per_token / 1e12
    mfu = achieved / (peak_tflops * parallel_peaks) if peak_tflops else None  # every device the run used
    return Speed(tokens_per_s=tokens_per_s, achieved_tflops=achieved, mfu=mfu,
                 mfu_datasheet=achieved / (peak_datasheet * datasheet_devices) if peak_datasheet else None)
