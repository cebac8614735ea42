"""The doctor on Hugging Face's Flax GLUE fine-tuning script, offline, at 1 and 2 CPU devices, 3 runs each.

Usage (the script is not fetched: give the path of ``examples/flax/text-classification/run_flax_glue.py``
from transformers 4.x, e.g. v4.49.0; PYTHON is an interpreter with transformers 4.x, flax, optax, datasets
and evaluate installed, since transformers 5 dropped Flax)::

    python benchmarks/doctor_flax_glue.py run_flax_glue.py --python /path/to/venv/bin/python \
        [--workdir DIR] [--devices 1 2] [--runs 3] [--steps 30] [-- EXTRA_SCRIPT_ARGS...]

The fixture needs no network: ``--python`` writes a tiny random BERT (``save_pretrained``, with a
word-piece vocabulary of its own), train/validation CSV files, and a local ``accuracy/accuracy.py`` metric
module next to a copy of the script (``evaluate.load("accuracy")`` resolves a folder of that name in the
working directory before the Hub, and the doctor runs the script in its own folder). The runs set
``HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1`` and ``XLA_FLAGS=--xla_force_host_platform_device_count=N``.
Prints each run's findings (severity, id, title, evidence) and a table of severities per run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

WRITE_FIXTURE = r'''
import csv, os, random, sys
from transformers import BertConfig, BertTokenizerFast, FlaxBertForSequenceClassification

out = sys.argv[1]
rng = random.Random(0)
words = [f"w{i}" for i in range(200)]
vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]
os.makedirs(f"{out}/model", exist_ok=True)
with open(f"{out}/model/vocab.txt", "w") as f:
    f.write("\n".join(vocab) + "\n")
BertTokenizerFast(vocab_file=f"{out}/model/vocab.txt", do_lower_case=True).save_pretrained(f"{out}/model")
config = BertConfig(vocab_size=len(vocab), hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                    intermediate_size=128, max_position_embeddings=128, num_labels=2)
FlaxBertForSequenceClassification(config, seed=0).save_pretrained(f"{out}/model")
for name, n in (("train", 512), ("validation", 64)):
    with open(f"{out}/{name}.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["sentence1", "sentence2", "label"])
        for _ in range(n):
            w.writerow([" ".join(rng.choices(words, k=rng.randint(4, 20))),
                        " ".join(rng.choices(words, k=rng.randint(4, 20))), rng.randint(0, 1)])
os.makedirs(f"{out}/accuracy", exist_ok=True)
with open(f"{out}/accuracy/accuracy.py", "w") as f:
    f.write(ACCURACY)
'''

ACCURACY = '''"""Accuracy, as a local evaluate module (no Hub access needed)."""
import datasets
import evaluate


class Accuracy(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description="accuracy", citation="", inputs_description="predictions, references",
            features=datasets.Features({"predictions": datasets.Value("int32"),
                                        "references": datasets.Value("int32")}))

    def _compute(self, predictions, references):
        return {"accuracy": sum(int(p == r) for p, r in zip(predictions, references)) / max(len(references), 1)}
'''


def build_fixture(python: str, script: Path, workdir: Path) -> Path:
    """Copy the script into ``workdir`` and write the tiny model, the CSV files and the local metric there."""
    workdir.mkdir(parents=True, exist_ok=True)
    shutil.copy(script, workdir / script.name)
    if not (workdir / "model" / "flax_model.msgpack").exists():
        code = f"ACCURACY = {ACCURACY!r}\n{WRITE_FIXTURE}"
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "JAX_PLATFORMS": "cpu"}
        subprocess.run([python, "-c", code, str(workdir)], check=True, env=env)
    return workdir / script.name


def script_args(workdir: Path, extra: list[str]) -> list[str]:
    return ["--model_name_or_path", str(workdir / "model"), "--train_file", str(workdir / "train.csv"),
            "--validation_file", str(workdir / "validation.csv"), "--max_seq_length", "32",
            "--per_device_train_batch_size", "8", "--per_device_eval_batch_size", "8", "--num_train_epochs", "1",
            "--output_dir", str(workdir / "out"), "--eval_steps", "100000", "--save_steps", "100000",
            "--logging_steps", "100000", *extra]


def run_once(python: str, script: Path, args: list[str], devices: int, steps: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="twinbench-glue-") as tmp:
        out = Path(tmp, "doctor.json")
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
               "JAX_PLATFORMS": "cpu", "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}",
               "PYTHONPATH": str(REPO / "src")}
        cmd = [sys.executable, "-m", "twinbench.cli", "doctor", str(script), "--python", python,
               "--steps", str(steps), "--json", str(out), "--", *args]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if not out.exists():
            return {"error": (proc.stdout + proc.stderr)[-2000:], "exit": proc.returncode}
        doc = json.loads(out.read_text())
        doc["exit"] = proc.returncode
        return doc


def main(argv: list[str]) -> int:
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1:]
    else:
        extra = []
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("script", type=Path)
    ap.add_argument("--python", required=True, help="an interpreter with transformers 4.x + flax + datasets")
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "twinbench-flax-glue")
    ap.add_argument("--devices", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=30)
    opts = ap.parse_args(argv)
    script = build_fixture(opts.python, opts.script.resolve(), opts.workdir.resolve())
    args = script_args(opts.workdir.resolve(), extra)
    table: dict[int, list[dict[str, str]]] = {}
    for devices in opts.devices:
        for run in range(opts.runs):
            doc = run_once(opts.python, script, args, devices, opts.steps)
            print(f"== {devices} device(s), run {run + 1}: exit {doc.get('exit')}")
            if "error" in doc:
                print("   doctor could not run:\n" + doc["error"])
                table.setdefault(devices, []).append({})
                continue
            print(f"   step={doc.get('step_fn')} (found by {doc.get('step_signal')}) steps={doc.get('steps')} "
                  f"step_ms={doc.get('step_ms') or 0:.2f} compile_s={doc.get('compile_s', 0.0):.2f} "
                  f"wall_s={doc.get('wall_s', 0.0):.1f}")
            for e in doc.get("self_errors", []):
                print(f"   SELF-CHECK FAILED: {e}")
            for f in doc["findings"]:
                print(f"   {f['severity'].upper()} {f['id']}: {f['title']}\n      at: {f.get('location', '')}\n"
                      f"      {f['evidence']}\n      fix: {f['fix'].splitlines()[0]}")
            table.setdefault(devices, []).append({f["id"]: f["severity"] for f in doc["findings"]})
    print("\nseverities per run:")
    for devices, runs in table.items():
        ids = sorted({i for r in runs for i in r})
        for i in ids:
            print(f"   {devices} device(s) {i}: " + " ".join(r.get(i, "-") for r in runs))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
