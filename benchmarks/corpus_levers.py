"""The corpus of public script pairs (tests/explain/fixtures/README.md, "Public training scripts") as
benchmarks/explain_corpus.py runs it: each pair's traces, and the levers that test what explain names on them
and what the doctor warns of on their scripts. A lever is one change to one script (or one script against its
twin), run A against B; its script paths are relative to the folder of adapted scripts (``--scripts``), laid
out as the README says.

Usage: no command of its own; ``benchmarks/explain_corpus.py`` imports it (``--pairs`` picks among its pairs).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Lever:
    """One change that tests a statement on the scripts: run ``a`` against ``b``."""

    tests: str  # the statement (a gate's fact, a named row, a doctor warning) it checks
    a: list[str]  # script and its arguments, before the change
    b: list[str]  # after it
    source: str = "explain"  # whose statement: explain's, or the doctor's (``doctor: <finding id>``)
    expect: str = "B faster"  # what the statement predicts of B against A
    env_a: dict[str, str] = field(default_factory=dict)
    env_b: dict[str, str] = field(default_factory=dict)


@dataclass
class Pair:
    torch: str
    jax: str
    hlo: str
    levers: list[Lever]


_NANOGPT = ["--dataset=synth", "--device=cpu", "--compile=False", "--dtype=float32", "--n_layer=4", "--n_head=4",
            "--n_embd=128", "--batch_size=8", "--block_size=64", "--eval_interval=100000", "--eval_iters=1",
            "--log_interval=1", "--dropout=0.0"]
NANOGPT_TORCH = ["nanogpt_torch/train.py", *_NANOGPT, "--gradient_accumulation_steps=1"]
NANOGPT_JAX = ["nanogpt_jax/train.py", *_NANOGPT, "--max_new_tokens=2"]
LM_TORCH = ["lm_torch/main.py", "--data", "data/synth", "--model", "Transformer", "--emsize", "128", "--nhid", "512",
            "--nlayers", "4", "--nhead", "4", "--batch_size", "8", "--bptt", "64", "--dropout", "0.1",
            "--use-optimizer", "--lr", "0.001", "--save", "/tmp/twinbench-corpus-lm.pt"]
LM_JAX = ["lm_jax/lm_flax.py"]
MNIST_TORCH = ["mnist/mnist_torch.py"]
MNIST_JAX = ["mnist/mnist_flax.py"]
VAE_TORCH = ["vae/vae_torch.py", "--no-profile"]
VAE_JAX = ["vae/vae_flax.py", "--no-profile"]
RNN_TORCH = ["rnn/rnn_torch.py"]
RNN_JAX = ["rnn/rnn_flax.py"]


def _gap(torch: list[str], jax: list[str], rows: str) -> Lever:
    """The pair's two scripts against each other: the gap explain attributes to its named rows, by the clock."""
    return Lever(f"the gap: torch slower than JAX, {rows} (A the torch script, B the JAX one)", torch, jax)


PAIRS = {
    "vae_eager": Pair("pair_vae_torch.json.gz", "pair_vae_jax_eager.xplane.pb.gz", "pair_vae_jax_eager.hlo.txt.gz", [
        Lever("the JAX step runs op by op: jit it first (A not jitted, B jitted as published); the doctor's "
              "jax-eager-ops fix, @jax.jit, is the same change", [*VAE_JAX, "--variant", "eager"],
              [*VAE_JAX, "--variant", "published"], source="explain + doctor: jax-eager-ops")]),
    "vae": Pair("pair_vae_torch.json.gz", "pair_vae_jax.xplane.pb.gz", "pair_vae_jax.hlo.txt.gz", [
        Lever("the forward found by data flow: returning the loss adds no work (A the published step, B returning "
              "its loss)", [*VAE_JAX, "--variant", "published"], [*VAE_JAX, "--variant", "loss"],
              expect="no difference"),
        Lever("the machine was busy when the traces were recorded: torch at two threads (A) against one (B)",
              VAE_TORCH, VAE_TORCH, env_a={"OMP_NUM_THREADS": "2"}, env_b={"OMP_NUM_THREADS": "1"},
              expect="B slower on a quiet machine"),
        Lever("jax-no-donation: @functools.partial(jax.jit, donate_argnums=(0,)) as printed (A published, "
              "B donated)", [*VAE_JAX, "--variant", "published"], [*VAE_JAX, "--variant", "published", "--donate"],
              source="doctor: jax-no-donation", expect="runs; the warning gone (its claim is memory, not time)")]),
    "vae_loss": Pair("pair_vae_torch.json.gz", "pair_vae_jax_loss.xplane.pb.gz", "pair_vae_jax_loss.hlo.txt.gz", []),
    "nanogpt": Pair("pair_nanogpt_torch.json.gz", "pair_nanogpt_jax.xplane.pb.gz", "pair_nanogpt_jax.hlo.txt.gz", [
        _gap(NANOGPT_TORCH, NANOGPT_JAX, "50% of it backward / matmul, 26% forward / matmul")]),
    "lm": Pair("pair_lm_torch.json.gz", "pair_lm_jax.xplane.pb.gz", "pair_lm_jax.hlo.txt.gz", [
        _gap(LM_TORCH, LM_JAX, "37% of it backward / matmul, 19% forward / element-wise"),
        Lever("implementation: forward / element-wise: torch's dropout masks (aten::bernoulli_) move 5.7x JAX's "
              "bytes (A dropout 0.1, B torch's dropout 0: every layer's, as the adapted model passes it on)", LM_TORCH,
              [*LM_TORCH[:LM_TORCH.index("--dropout")], "--dropout", "0.0",
               *LM_TORCH[LM_TORCH.index("--dropout") + 2:]])]),
    "mnist": Pair("pair_mnist_torch.json.gz", "pair_mnist_jax.xplane.pb.gz", "pair_mnist_jax.hlo.txt.gz", [
        _gap(MNIST_TORCH, MNIST_JAX, "58% of it backward / matmul, 34% forward / matmul"),
        Lever("implementation: backward and forward / matmul: torch's convnet does 3.3x and 2.6x JAX's FLOPs "
              "(its second convolution before pooling); A as published, B pooled first as the Flax model",
              MNIST_TORCH, [*MNIST_TORCH, "--pool-first"]),
        Lever("jax-no-donation: @nnx.jit(donate_argnames=('model', 'optimizer', 'metrics', 'rngs')) as printed "
              "(A published, B donated)", MNIST_JAX, [*MNIST_JAX, "--donate"], source="doctor: jax-no-donation",
              expect="runs; the warning gone (its claim is memory, not time)")]),
    "rnn": Pair("pair_rnn_torch.json.gz", "pair_rnn_jax.xplane.pb.gz", "pair_rnn_jax.hlo.txt.gz", [
        _gap(RNN_TORCH, RNN_JAX, "its LSTM layers' gate products: backward / matmul and forward / matmul, as "
             "explain names them on the recorded traces once the machine is quiet")]),
}
