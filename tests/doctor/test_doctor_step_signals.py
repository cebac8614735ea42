"""Which signal marks the step: the most specific one the script gives (in-process, no subprocess)."""

from __future__ import annotations

from typing import Any

import pytest

from twinbench.doctor.recorder import MARK_KEY, Recorder, StopScript


def test_most_specific_signal_wins() -> None:
    rec = Recorder()
    for _ in range(3):
        rec.step_call("torch:loss.backward", "torch-backward")
    assert rec.step_key() == "torch:loss.backward"
    rec.step_call("torch:Optimizer.step", "torch-optimizer")
    assert rec.step_key() == "torch:Optimizer.step"
    rec.step_call(MARK_KEY, "marked")
    assert rec.step_key() == MARK_KEY


def test_backward_is_the_step_of_a_manual_sgd_loop() -> None:
    torch = pytest.importorskip("torch")
    from twinbench.doctor.session import Session

    session = Session(max_steps=3)
    w = torch.zeros(4, requires_grad=True)
    done = 0
    with pytest.raises(StopScript):
        for _ in range(10):
            loss = ((w - 1.0) ** 2).sum()
            loss.backward()  # the doctor ends the loop here at --steps 3
            with torch.no_grad():
                w.add_(w.grad, alpha=-0.1)
                w.grad.zero_()
            done += 1
    obs = session.stop()
    assert obs["step_kind"] == "torch-backward" and obs["steps"] == 3 and done == 2


def test_marked_step_stops_the_loop() -> None:
    import twinbench.doctor as doctor
    from twinbench.doctor.session import Session

    session = Session(max_steps=2)
    with pytest.raises(StopScript):
        for _ in range(5):
            doctor.step()
    obs = session.stop()
    assert obs["step_kind"] == "marked" and obs["steps"] == 2
    doctor.step()  # outside the doctor: nothing happens


def test_host_transfer_severity_follows_its_cost() -> None:
    from twinbench.doctor import findings as fd

    base = {"steady_steps": 10, "step_ms": 0.4, "per_step": {"h2d_numpy_args": 2.0}}
    tiny = fd.jax_host_transfer({**base, "per_step": {**base["per_step"], "h2d_numpy_bytes": 512.0},
                                 "info": {"h2d": {"bytes_per_s": 2**30}}})
    big = fd.jax_host_transfer({**base, "per_step": {**base["per_step"], "h2d_numpy_bytes": 2.0**20},
                                "info": {"h2d": {"bytes_per_s": 2**30}}})
    assert tiny.severity == "info" and "% of the 0.40 ms steady iteration" in tiny.evidence
    assert big.severity == "warning" and "GiB/s" in big.evidence


def test_eager_grad_is_the_step_where_no_jit_marks_it() -> None:
    jax = pytest.importorskip("jax")
    from twinbench.doctor.session import Session

    session = Session(max_steps=3)
    jnp = jax.numpy
    w = jnp.ones(4)
    grad_fn = jax.value_and_grad(lambda w: jnp.sum((w - 2.0) ** 2))
    with pytest.raises(StopScript):
        for _ in range(10):
            _loss, g = grad_fn(w)  # op by op, no jit anywhere: the gradient call marks the step
            w = w - 0.1 * g
    obs = session.stop()
    assert obs["step_kind"] == "grad" and obs["steps"] == 3 and "jax.grad" in obs["step_signal"]

    session = Session()
    step = jax.jit(lambda w: w - 0.1 * jax.grad(lambda w: jnp.sum(w**2))(w))  # grad under jit: not counted
    for _ in range(3):
        w = step(w)
        jax.grad(lambda w: jnp.sum(w**3))(w)  # an eager gradient too, but a jitted function marks the step
    obs = session.stop()
    assert obs["step_kind"] == "jit" and obs["steps"] == 3, obs["candidates"]
    assert [n for k, n in obs["candidates"].items() if k.startswith("grad(")] == [3], obs["candidates"]


def test_split_of_each_iteration() -> None:
    rec = Recorder()
    # a step every 50 ms whose results are ready 10 ms after its call; 2 ms of eager work in each iteration
    for i in range(6):
        rec.calls["jit:step"].append((100.0 + 0.05 * i, {"eager_s:s": 0.002 * i}))
        rec.step_ready("jit:step", i, 100.0 + 0.05 * i + 0.01)
    rec.kinds["jit:step"] = "jit"
    split = rec.split("jit:step")
    assert split["iterations"] == 4 and split["async"]  # steady: from the 2nd step start to the last one
    assert split["iter_ms"] == pytest.approx(50.0) and split["step_ms"] == pytest.approx(10.0)
    assert split["host_ms"] == pytest.approx(2.0) and split["idle_ms"] == pytest.approx(38.0)
    del rec.ready["jit:step"]
    assert rec.split("jit:step") is None  # no step end known: nothing to split


@pytest.mark.parametrize(("critic_steps", "step_fn"), [(1, "Optimizer.step"), (5, "Optimizer.step#2")])
def test_a_loop_of_two_optimizers_steps_once_an_iteration(critic_steps: int, step_fn: str) -> None:
    """A GAN's iteration steps its discriminator's optimizer, then its generator's (a WGAN's critic several
    times a generator step): one iteration is one step, marked by the optimizer stepping least often, so
    --steps, the step time and per-step rates count iterations, not optimizer calls."""
    torch = pytest.importorskip("torch")
    from twinbench.doctor.session import Session

    d, g = torch.nn.Linear(4, 1), torch.nn.Linear(2, 4)
    opt_d, opt_g = torch.optim.SGD(d.parameters(), lr=0.1), torch.optim.SGD(g.parameters(), lr=0.1)
    session = Session(max_steps=6)  # more than the critic's steps before the generator's first
    iterations = 0
    with pytest.raises(StopScript):
        for _ in range(20):
            for _ in range(critic_steps):
                opt_d.zero_grad()
                d(g(torch.randn(8, 2)).detach()).mean().backward()
                opt_d.step()
            opt_g.zero_grad()
            (-d(g(torch.randn(8, 2))).mean()).backward()
            opt_g.step()  # the doctor ends the loop at the 6th step of the step's optimizer
            iterations += 1
    obs = session.stop()
    assert obs["step_fn"] == step_fn and obs["steps"] == 6
    # stopped in the 6th iteration, at the step optimizer's 6th call: before the generator's when it is the
    # discriminator's (the first to step, where both step as often), after it when it is the generator's
    assert (obs["candidates"]["Optimizer.step"], obs["candidates"]["Optimizer.step#2"]) == (
        (6, 5) if critic_steps == 1 else (30, 6)) and iterations == 5
    assert obs["info"].torch_optimizers == {"Optimizer.step": "SGD", "Optimizer.step#2": "SGD"}
    from twinbench.doctor.observations import typed
    from twinbench.doctor.report import summary_line

    assert "one of 2 optimizers stepping in the loop (Optimizer.step SGD: " in summary_line(typed(obs))


def test_an_optimizer_stepped_now_and_then_does_not_mark_the_iteration() -> None:
    """A second optimizer stepped every 20 iterations (an auxiliary head's) is not the loop's iteration: the step
    stays the one stepped every iteration; one stepped every 5th (a critic's ratio turned round) would be."""
    first = "torch:Optimizer.step"  # instruments_torch.STEP_KEY: the first optimizer's, the next one's with #2
    for every, step in ((20, first), (5, f"{first}#2")):
        rec = Recorder()
        for i in range(60):
            rec.step_call(first, "torch-optimizer")
            if i % every == every - 1:
                rec.step_call(f"{first}#2", "torch-optimizer")
        assert rec.step_key() == step, every


def test_an_optimizer_made_again_each_epoch_is_the_same_step() -> None:
    """A loop that makes its optimizer again every epoch (for the same model) steps one optimizer as far as the
    step goes: --steps counts across the epochs."""
    torch = pytest.importorskip("torch")
    from twinbench.doctor.session import Session

    net = torch.nn.Linear(4, 1)
    session = Session(max_steps=7)
    with pytest.raises(StopScript):
        for _ in range(5):
            opt = torch.optim.SGD(net.parameters(), lr=0.1)  # made again, epoch after epoch
            for _ in range(3):
                opt.zero_grad()
                net(torch.randn(8, 4)).mean().backward()
                opt.step()
    obs = session.stop()
    assert obs["step_fn"] == "Optimizer.step" and obs["steps"] == 7
    assert list(obs["candidates"]) == ["loss.backward", "Optimizer.step"]


def test_a_whole_step_under_torch_compile_is_the_step() -> None:
    """torch's compiled-optimizer pattern: forward, backward and the update in one torch.compile'd function. No
    optimizer hook and no loss.backward() is seen from outside it; its calls are the step, --steps counts them."""
    torch = pytest.importorskip("torch")
    from twinbench.doctor.session import Session

    net = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    session = Session(max_steps=5)
    try:
        @torch.compile(backend="eager")  # the decorator form, with an option: dynamo alone, fast
        def train_step(x: Any) -> Any:
            loss = net(x).mean()
            loss.backward()
            opt.step()
            return loss

        with pytest.raises(StopScript):
            for _ in range(20):
                opt.zero_grad()
                train_step(torch.randn(8, 4))
    finally:
        obs = session.stop()
    assert obs["step_fn"] == "train_step" and obs["step_kind"] == "torch-compiled" and obs["steps"] == 5
    assert torch.compile.__module__ == "torch"  # put back as it was


def test_the_observations_count_the_frameworks_run_and_the_iterations_used() -> None:
    """A torch step in a script that also imports JAX: only torch ran (its threads count, not JAX's); and the
    number of iterations the step time averages is the iterations', not the frameworks' (a name once shadowed it)."""
    from twinbench.doctor.summary import observations

    rec = Recorder()
    rec.frameworks.update({"torch", "jax"})
    for i in range(8):
        rec.calls["torch:Optimizer.step"].append((100.0 + 0.01 * i, {}))
    rec.kinds["torch:Optimizer.step"] = "torch-optimizer"
    obs = observations(rec)
    assert obs["frameworks_used"] == ["torch"] and obs["frameworks"] == ["jax", "torch"]
    assert obs["iterations_used"] == obs["steady_steps"] == 6


def test_a_step_that_compiled_is_left_out_of_the_median_step_as_of_the_mean() -> None:
    """Of two steady steps, one recompiling for 6 s: the step is the quiet one's, not their median (their mean,
    3.2 s a step where the loop steps in 7 ms: a pair's untraced clock once read 4,971.5 ms against 14.8 traced);
    an asynchronous step of which one quiet step's results were waited on is that step's completion."""
    from twinbench.doctor.summary import observations

    rec = Recorder()
    rec.frameworks.add("jax")
    key = "jax:jit:train_step"
    starts = [100.0, 100.5, 100.507, 106.507]  # step 0, a quiet step (7 ms), then a step that compiled for 6 s
    compiled = [0.0, 0.0, 0.0, 6.0]
    for t, c in zip(starts, compiled, strict=True):
        rec.calls[key].append((t, {"compile_s:s": c}))
    obs = observations(rec)
    assert obs["steady_steps"] == 2 and obs["iterations_used"] == 1
    assert obs["step_ms"] == pytest.approx(7.0) and obs["iter_ms"] == pytest.approx(7.0)
    rec.kinds[key] = "jit"
    rec.ready[key] = {1: 100.511, 2: 100.520, 3: 106.52}  # each step's results ready 4-13 ms after its call
    obs = observations(rec)
    assert obs["step_timing"] == "completion" and obs["step_ms"] == pytest.approx(9.0)
