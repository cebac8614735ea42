#!/bin/bash
# Source this on a TPU VM where only JAX and libtpu are preinstalled, from the project's root, with .whl-tpu
# beside it (benchmarks/tpu/fetch-wheels.sh):   source benchmarks/tpu/setup.sh
# Installs under $TWINBENCH_SITE (default /tmp/site: no root needed) from the wheels and the VM's own package
# index (PIP_INDEX, default file:///opt/pypi/simple), plus a CPU build of torch (PIP_FIND_LINKS, default
# /opt/wheels) for the torch twins under torchax, and puts this checkout's src/ and the site AFTER the VM's own
# JAX on PYTHONPATH (the preinstalled jax + libtpu stay the ones used). About 90 s on a fresh VM.
# One program at a time may hold the chip: no pytest -n there; a helper process that must not take the chip
# runs with JAX_PLATFORMS=cpu. Check with: python3 -m twinbench.environment --tpu
S=${TWINBENCH_SITE:-/tmp/site}; mkdir -p "$S"
INDEX=${PIP_INDEX:-file:///opt/pypi/simple}; LINKS=${PIP_FIND_LINKS:-/opt/wheels}
PIP="python3 -m pip install --isolated -q --no-compile --no-cache-dir --target $S"
[ -d .whl-tpu ] && PIP_CONFIG_FILE=/dev/null $PIP --no-index --no-deps --upgrade .whl-tpu/*.whl
PIP_CONFIG_FILE=/dev/null $PIP --only-binary=:all: --index-url "$INDEX" \
  flax optax rich typer safetensors tokenizers matplotlib scipy packaging absl-py protobuf fsspec zipp \
  importlib_resources typing-extensions
PIP_CONFIG_FILE=/dev/null $PIP --only-binary=:all: --index-url "$INDEX" torch --find-links "$LINKS"
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$(pwd)/src:$S PYTHONUNBUFFERED=1
python3 -c 'import jax, flax, optax, torch, twinbench; print("twinbench on", jax.devices(), "jax", jax.__version__, "flax", flax.__version__, "torch", torch.__version__)'
