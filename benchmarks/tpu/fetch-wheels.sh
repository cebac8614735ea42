#!/bin/bash
# Run on a machine with pip and package-index access, in the project's root: downloads the wheels a TPU VM's own
# package index may lack (grain, submitit, torchax; transformers < 5 for the Hugging Face Flax comparisons with
# WITH_HF=1) into ./.whl-tpu (kept out of git through .git/info/exclude), for a TPU VM whose Python is 3.11.
# The transformers release also runs a user's Hugging Face model under torchax (tests/byo/test_hf_floor.py trains
# examples/byo/hf_bert.py with it and with the lowest release pyproject.toml accepts).
# Then copy .whl-tpu to the TPU VM (or carry it) and `source benchmarks/tpu/setup.sh` there.
set -eu
D=${1:-.whl-tpu}
grep -qx "/$D/" .git/info/exclude 2>/dev/null || echo "/$D/" >> .git/info/exclude
P="--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.11 --implementation cp $P -d "$D" \
  grain==0.2.18 array_record etils portpicker cloudpickle submitit torchax==0.0.13 ijson==3.6.0 msgspec==0.23.0
if [ "${WITH_HF:-0}" = 1 ]; then
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.11 --implementation cp $P -d "$D" \
    transformers==4.49.0 tokenizers==0.21.4 huggingface_hub==0.36.2 tqdm  # huggingface_hub imports tqdm
fi
ls "$D"; du -sh "$D"
