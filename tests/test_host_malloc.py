"""The host allocator of a run: twinbench's glibc malloc tunables, added to the user's GLIBC_TUNABLES and given to
every worker; the page faults and kernel share a record carries, and what the summary says of them."""

from __future__ import annotations

import mmap
import sys
from pathlib import Path
from typing import Any

import pytest

from twinbench import host_malloc, runner
from twinbench.measure import page_faults, platforms
from twinbench.measure.clock import per_step, time_steps
from twinbench.measure.compiles import TorchCompiles
from twinbench.record import Record, as_record
from twinbench.report.table import conditions
from twinbench.spec import SpecError, from_preset, validate

HUGE = "glibc.malloc.hugetlb=1"
KEEP = "glibc.malloc.arena_max=1:glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=4294967296"


@pytest.mark.parametrize(("mode", "cpu", "expected"), [
    ("madvise", True, HUGE), ("always", True, HUGE), ("never", True, KEEP), (None, True, KEEP),
    ("madvise", False, HUGE), ("never", False, ""),  # an accelerator's host: huge pages or glibc's own
])
def test_tuned_asks_for_huge_pages_and_keeps_freed_memory_only_without_them(
        mode: str | None, cpu: bool, expected: str) -> None:
    assert host_malloc.merged("", "tuned", mode, cpu) == expected


def test_the_users_tunables_are_kept_and_win() -> None:
    assert host_malloc.merged("glibc.malloc.hugetlb=0", "tuned", "madvise") == "glibc.malloc.hugetlb=0"
    assert host_malloc.merged("glibc.malloc.tcache_count=0", "tuned", "madvise") == f"glibc.malloc.tcache_count=0:{HUGE}"
    assert host_malloc.merged("glibc.malloc.mmap_max=5", "tuned", "never") == (
        "glibc.malloc.mmap_max=5:glibc.malloc.arena_max=1:glibc.malloc.trim_threshold=4294967296")
    assert host_malloc.merged("glibc.malloc.tcache_count=0", "system", "madvise") == "glibc.malloc.tcache_count=0"
    assert host_malloc.merged("", "system", "madvise") == ""
    with pytest.raises(ValueError, match="allowed: tuned, system"):
        host_malloc.merged("", "fast", "madvise")


def test_the_thp_mode_is_read_from_the_kernels_file(tmp_path: Path) -> None:
    f = tmp_path / "enabled"
    f.write_text("always [madvise] never\n")
    assert host_malloc.thp_mode(f) == "madvise"
    f.write_text("[always] madvise never\n")
    assert host_malloc.thp_mode(f) == "always"
    f.write_text("garbage")
    assert host_malloc.thp_mode(f) is None
    assert host_malloc.thp_mode(tmp_path / "missing") is None


def test_nothing_is_set_without_glibc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(host_malloc, "glibc", lambda: False)
    assert host_malloc.worker_env("tuned", {}) == {}


def test_every_worker_gets_the_setting_of_its_spec(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(host_malloc, "glibc", lambda: True)
    monkeypatch.setattr(host_malloc, "thp_mode", lambda: "madvise")
    monkeypatch.setattr(platforms, "here", lambda: "cpu")
    monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    seen: list[dict[str, str]] = []

    def fake_worker(spec: Any, timeout: float, env: dict[str, str]) -> Record:
        seen.append(dict(env))
        return as_record({"status": "ok", "warnings": []})

    monkeypatch.setattr(runner, "_run_one", fake_worker)
    monkeypatch.setattr(runner, "LOAD", runner.LoadMeter(shared=False))
    spec = validate(from_preset("tiny", {"steps": 3, "warmup": 1}, framework="jax", strategy="jit"))
    runner.run_one(spec, timeout=10)
    runner.run_one(spec.evolve(host_malloc="system"), timeout=10)
    runner.run_one(spec, timeout=10, env={"GLIBC_TUNABLES": "glibc.malloc.hugetlb=0"})  # explain --try env:...
    monkeypatch.setattr(platforms, "here", lambda: "tpu")  # an accelerator's host: huge pages only
    runner.run_one(spec, timeout=10)
    monkeypatch.setattr(host_malloc, "thp_mode", lambda: "never")  # ... and no huge pages: glibc's own there
    runner.run_one(spec, timeout=10)
    assert [e.get("GLIBC_TUNABLES") for e in seen] == [HUGE, None, "glibc.malloc.hugetlb=0", HUGE, None]


def test_the_spec_refuses_an_unknown_choice() -> None:
    with pytest.raises(SpecError, match="--host-malloc: unknown value 'fast'; allowed: tuned, system"):
        validate(from_preset("tiny", {"host_malloc": "fast"}, framework="jax", strategy="jit"))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="page faults of fresh anonymous memory: Linux")
def test_the_steady_steps_page_faults_are_counted_per_step() -> None:
    size = 8 << 20  # 2048 pages of 4 KiB

    def step(i: int) -> float:  # a step given fresh memory every time, as XLA:CPU's temporaries are
        m = mmap.mmap(-1, size)
        m.madvise(mmap.MADV_NOHUGEPAGE)  # 4 KiB pages whatever the kernel's THP mode
        for off in range(0, size, mmap.PAGESIZE):
            m[off] = 1
        m.close()
        return 1.0

    timing = time_steps(step, lambda: None, steps=6, warmup=2, compiles=TorchCompiles())
    assert timing.os_usage.page_faults_per_step >= 0.9 * size / mmap.PAGESIZE
    assert 0 < timing.os_usage.kernel_cpu_share <= 1
    quiet = time_steps(lambda i: 1.0, lambda: None, steps=6, warmup=2, compiles=TorchCompiles())
    assert quiet.os_usage.page_faults_per_step < 100
    assert per_step(timing, 2).os_usage.page_faults_per_step == pytest.approx(
        timing.os_usage.page_faults_per_step / 2, abs=0.1)
    # costed: the faults at one fault's measured cost are a share of the CPU time no larger than the kernel's
    # (with a margin for the two clocks' resolution), and a step of no faults is not costed at all
    assert 0 < timing.os_usage.fault_cpu_share <= timing.os_usage.kernel_cpu_share + 0.1
    assert quiet.os_usage.fault_cpu_share is None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="page faults of fresh anonymous memory: Linux")
def test_one_faults_cost_is_measured_and_turns_faults_into_a_share() -> None:
    cost = page_faults.fault_us()
    assert cost is not None and 0.01 < cost < 1000  # from tens of ns to a ms: a fault, not a clock's tick
    assert page_faults.fault_us() == cost  # once a process
    assert page_faults.fault_share(10_000, 1.0, 2.0) == 0.02  # 10,000 faults of 2 µs in a CPU-second
    assert page_faults.fault_share(10_000, 0.5, 2.0) == 0.04
    assert page_faults.fault_share(10_000, None, 2.0) is None and page_faults.fault_share(10_000, 1.0, None) is None


def test_the_faults_are_never_priced_above_the_kernels_own_share() -> None:
    # a fault measured dearer than the step's own (issue 76: 102% of the CPU time against the kernel's 82% on an
    # Intel Xeon): the faults' share stops at the kernel's, whatever one fault was measured to cost
    start = page_faults.Usage(minor_faults=0, major_faults=0, user_s=0.0, system_s=0.0)
    end = page_faults.Usage(minor_faults=20_000, major_faults=0, user_s=0.2, system_s=0.8)
    for cost_us in (1.0, 40.0, 51.0, 1000.0):
        shares = page_faults.per_step(start, end, steps=10, cost_us=cost_us)
        assert shares.kernel_cpu_share == 0.8
        assert 0 < shares.fault_cpu_share <= shares.kernel_cpu_share
    assert page_faults.per_step(start, end, steps=10, cost_us=1.0).fault_cpu_share == 0.02  # below: as costed
    assert page_faults.fault_share(100_000, 1.0, 10.0, kernel_share=0.3) == 0.3
    assert page_faults.fault_share(100_000, 1.0, 10.0) == 1.0  # no kernel share known: the cost alone


def _record(name: str, faults: float | None, share: float | None, tunables: str | None, **more: Any) -> Record:
    return as_record({"status": "ok", "framework": "jax", "strategy": name, "page_faults_per_step": faults,
                      "kernel_cpu_share": share, "glibc_tunables": tunables, **more})


def test_the_summary_names_the_allocator_and_a_step_paying_for_fresh_pages() -> None:
    lines = conditions([_record("jit", 36846.1, 0.31, None), _record("naive", 12.0, 0.02, None)])
    assert "host allocator: glibc's own for every run" in lines
    faults = [x for x in lines if x.startswith("page faults:")]
    assert len(faults) == 1 and "jax/jit 36,846 page faults a step (about 144 MiB" in faults[0]
    assert "31% of its CPU time in the kernel" in faults[0] and "(--host-malloc tuned, the default," in faults[0]
    still = [x for x in conditions([_record("naive", 4546.0, 0.16, HUGE)]) if x.startswith("page faults:")]
    assert len(still) == 1 and f"(under GLIBC_TUNABLES={HUGE}; with GLIBC_TUNABLES={HUGE}:{KEEP} set" in still[0]
    lines = conditions([_record("jit", 736.4, 0.10, HUGE), _record("naive", 12.0, 0.02, None)])
    assert f"host allocator per run: jax/jit GLIBC_TUNABLES={HUGE}; jax/naive glibc's own" in lines
    assert not [x for x in lines if x.startswith("page faults:")]
    assert (f"host allocator: GLIBC_TUNABLES={HUGE} for every run (--host-malloc tuned; 'system' keeps glibc's own)"
            in conditions([_record("jit", 736.4, 0.10, HUGE)]))
    assert not [x for x in conditions([_record("jit", None, None, None)]) if "allocator" in x]  # an older record
    # faults whose measured cost is a small share of the CPU time are not named, whatever the kernel's share
    cheap = _record("naive", 4546.0, 0.16, HUGE, fault_cpu_share=0.02)
    assert not [x for x in conditions([cheap]) if x.startswith("page faults:")]


def test_costly_needs_both_the_faults_and_the_kernel_share() -> None:
    assert page_faults.costly(0.2, 5000)
    assert not page_faults.costly(0.05, 5000)
    assert not page_faults.costly(0.5, 500)
    assert not page_faults.costly(None, None)
    # where the faults are costed, their own share must reach the threshold too: the kernel's time was not theirs
    assert page_faults.costly(0.2, 5000, 0.15)
    assert not page_faults.costly(0.2, 5000, 0.03)
    assert not page_faults.costly(0.05, 5000, 0.3)  # nor more than the kernel's time
