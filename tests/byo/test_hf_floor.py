"""Hugging Face BERT through torchax with the lowest transformers pyproject.toml accepts, and with the one the
TPU recipe fetches (benchmarks/tpu/fetch-wheels.sh WITH_HF=1).

The suite's own environment has a recent transformers; a user may have any accepted one, and transformers 4.x
checks token and mask values in Python ``if`` statements that a traced step cannot answer. The floor version is
installed from the package index into a scratch folder under twinbench's cache folder (``pip install --target``, the
transformers release and only those of its requirements this environment does not already satisfy: torch, jax
and numpy are never reinstalled), kept there so a rerun installs nothing, and put first on ``PYTHONPATH`` of a
fresh process (tests/byo/child.py ``hf-bert``) that trains examples/byo/hf_bert.py under ``jax:torchax`` and
``jax:torchax+bf16`` (both attention implementations with the floor; the SDPA one with the recipe's). Skipped,
with the reason, only when the index cannot be reached.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
CHILD = Path(__file__).with_name("child.py")
#: what pip prints when the index cannot be reached (or does not have the release): a skip, not a failure
UNREACHABLE = ("Could not find a version", "No matching distribution", "NewConnectionError", "Network is unreachable",
               "Temporary failure in name resolution", "Max retries exceeded", "ConnectTimeout", "ReadTimeout")


def scratch_root() -> Path:
    """Where scratch environments are kept between runs: ``test-envs`` in twinbench's own cache folder (the
    suite's ``TWINBENCH_CACHE`` is a fresh folder per run, tests/conftest.py, and would install it every time)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(base) / "twinbench" / "test-envs"


def transformers_floor() -> str:
    """The lowest transformers pyproject.toml accepts (its ``transformers>=X``)."""
    found = re.search(r'"transformers>=([0-9][0-9.]*)', (ROOT / "pyproject.toml").read_text())
    assert found, "pyproject.toml names no transformers floor"
    return found.group(1)


def recipe_version() -> str:
    """The transformers release the TPU recipe fetches."""
    found = re.search(r"transformers==([0-9][0-9.]*)", (ROOT / "benchmarks" / "tpu" / "fetch-wheels.sh").read_text())
    assert found, "benchmarks/tpu/fetch-wheels.sh fetches no pinned transformers"
    return found.group(1)


def unmet(target: Path) -> list[str]:
    """The requirements of the distributions in ``target`` that neither ``target`` nor this environment
    satisfies (markers evaluated here, extras left out)."""
    there = {canonicalize_name(d.metadata["Name"]): d.version for d in importlib.metadata.distributions(path=[str(target)])}
    need = []
    for dist in importlib.metadata.distributions(path=[str(target)]):
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue
            name = canonicalize_name(req.name)
            try:
                have = there.get(name) or importlib.metadata.version(req.name)
            except importlib.metadata.PackageNotFoundError:
                have = None
            if have is None or not req.specifier.contains(have, prereleases=True):
                need.append(f"{req.name}{req.specifier}")
    return sorted(set(need))


def pip_target(target: Path, requirements: list[str]) -> None:
    """``pip install --target`` without dependencies, and without byte-compiling the thousands of modules
    transformers ships (the child compiles the few it imports, once: the folder is kept); skip the test when the
    index cannot be reached."""
    p = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                        "--no-deps", "--no-compile", "--target", str(target), *requirements], capture_output=True,
                       text=True, timeout=900)
    if p.returncode != 0:
        said = (p.stderr or p.stdout).strip()
        if any(s in said for s in UNREACHABLE):
            pytest.skip(f"the package index cannot give {' '.join(requirements)}: {said.splitlines()[-1][:200]}")
        raise AssertionError(f"pip install --target {target} {' '.join(requirements)} failed: {said[-2000:]}")


def scratch_transformers(version: str) -> Path:
    """A folder holding transformers ``version`` and what it needs beyond this environment, installed once
    into twinbench's cache (a half-made folder from an interrupted install is made again)."""
    target = scratch_root() / f"transformers-{version}"
    if (target / ".complete").is_file():
        return target
    shutil.rmtree(target, ignore_errors=True)
    partial = target.with_name(f"{target.name}.partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    requirements = [f"transformers=={version}"]
    for _ in range(8):  # transformers, then its missing requirements, then theirs
        pip_target(partial, requirements)
        requirements = unmet(partial)
        if not requirements:
            break
    else:
        raise AssertionError(f"the requirements of transformers {version} did not settle: {requirements}")
    (partial / ".complete").touch()
    try:
        partial.rename(target)
    except OSError:  # another process made it meanwhile
        shutil.rmtree(partial, ignore_errors=True)
    return target


def run_child(version: str, mode: str, tmp: Path) -> dict:
    """tests/byo/child.py ``mode`` with transformers ``version`` first on the path."""
    target = scratch_transformers(version)
    out = tmp / "child.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(target), str(ROOT / "src"),
                                                        os.environ.get("PYTHONPATH", "")])}
    p = subprocess.run([sys.executable, str(CHILD), mode, str(out)], capture_output=True, text=True,
                       timeout=900, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    return {"wanted": version, "target": target, **json.loads(out.read_text())[mode]}


@pytest.fixture(scope="module")
def floor_run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return run_child(transformers_floor(), "hf-bert", tmp_path_factory.mktemp("hf-floor"))


@pytest.fixture(scope="module")
def recipe_run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    if recipe_version() == transformers_floor():
        pytest.skip("the TPU recipe fetches the floor itself: tested above")
    return run_child(recipe_version(), "hf-bert-sdpa", tmp_path_factory.mktemp("hf-recipe"))


def check_trains(row: dict) -> None:
    assert row["torchax"] == pytest.approx(row["eager"], rel=1e-4)  # fp32: torch's own steps
    assert row["torchax+bf16"] == pytest.approx(row["eager"], rel=3e-2)  # the same function, in bf16
    assert row["torchax+bf16"] != row["torchax"]


def ran_the_version_asked_for(run: dict) -> bool:
    return Version(run["transformers"]) == Version(run["wanted"]) and Path(run["file"]).is_relative_to(run["target"])


def test_the_children_ran_the_versions_asked_for(floor_run, recipe_run):
    assert ran_the_version_asked_for(floor_run)
    assert ran_the_version_asked_for(recipe_run)


@pytest.mark.parametrize("build", ["build", "build_eager_attention"])
def test_hf_bert_trains_under_torchax_and_torchax_bf16_with_the_floor(floor_run, build):
    check_trains(floor_run[build])


def test_hf_bert_trains_under_torchax_and_torchax_bf16_with_the_tpu_recipes_version(recipe_run):
    check_trains(recipe_run["build"])
