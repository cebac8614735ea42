#!/bin/bash
# Source this on a TPU VM where only JAX and libtpu are preinstalled, from the project's root, with .whl-tpu
# beside it (benchmarks/tpu/fetch-wheels.sh):   source benchmarks/tpu/setup.sh
# Installs under $TWINBENCH_SITE (default /tmp/site: no root needed) from the wheels and the VM's own package
# index (PIP_INDEX, default file:///opt/pypi/simple), plus a CPU build of torch (PIP_FIND_LINKS, default
# /opt/wheels) for the torch twins under torchax, and puts this checkout's src/ and the site AFTER the VM's own
# JAX on PYTHONPATH (the preinstalled jax + libtpu stay the ones used). About 90 s on a fresh VM; sourced again,
# it installs only what the site lacks (a wheel of .whl-tpu whose version is not there yet, a package not there).
# It sets nothing in the shell that sources it but PYTHONPATH and PYTHONUNBUFFERED: its own variables are a
# function's locals, and the function is gone once it ran.
# One program at a time may hold the chip: no pytest -n there; a helper process that must not take the chip
# runs with JAX_PLATFORMS=cpu. Check with: python3 -m twinbench.environment --tpu

_twinbench_tpu_body() {
  local site=${TWINBENCH_SITE:-/tmp/site} index=${PIP_INDEX:-file:///opt/pypi/simple}
  local links=${PIP_FIND_LINKS:-/opt/wheels}
  mkdir -p "$site" || return
  # what the site has already is left out before pip is asked (below): pip --target installs whatever it is
  # given, and meets each folder already there with a "Target directory ... already exists" warning
  local -a pip=(python3 -m pip install --isolated -q --no-compile --no-cache-dir --target "$site")
  local -a wheels=() missing=()
  local whl name rest
  for whl in .whl-tpu/*.whl; do  # NAME-VERSION-...whl is installed when the site has NAME-VERSION.dist-info
    [ -f "$whl" ] || continue
    name=${whl##*/}; rest=${name#*-}
    [ -d "$site/${name%%-*}-${rest%%-*}.dist-info" ] || wheels+=("$whl")
  done
  if [ ${#wheels[@]} -gt 0 ]; then
    PIP_CONFIG_FILE=/dev/null "${pip[@]}" --no-index --no-deps --upgrade "${wheels[@]}" || return
  fi
  # the distributions not in the site yet, by their normalised names (typing-extensions = typing_extensions)
  _twinbench_missing() {
    python3 - "$site" "$@" <<'EOF'
import importlib.metadata as m, re, sys
norm = lambda n: re.sub(r"[-_.]+", "-", n or "").lower()
have = {norm(d.metadata["Name"]) for d in m.distributions(path=[sys.argv[1]])}
sys.stdout.write("".join(w + "\n" for w in sys.argv[2:] if norm(w) not in have))
EOF
  }
  mapfile -t missing < <(_twinbench_missing flax optax rich typer safetensors tokenizers matplotlib scipy packaging \
    absl-py protobuf fsspec zipp importlib_resources typing-extensions ijson msgspec)
  if [ ${#missing[@]} -gt 0 ]; then
    PIP_CONFIG_FILE=/dev/null "${pip[@]}" --only-binary=:all: --index-url "$index" "${missing[@]}" || return
  fi
  mapfile -t missing < <(_twinbench_missing torch)
  if [ ${#missing[@]} -gt 0 ]; then
    PIP_CONFIG_FILE=/dev/null "${pip[@]}" --only-binary=:all: --index-url "$index" torch --find-links "$links" \
      || return
  fi
  case ":${PYTHONPATH:-}:" in  # sourced twice, the path is not lengthened
    *":$(pwd)/src:$site:"*) ;;
    *) export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$(pwd)/src:$site ;;
  esac
  export PYTHONUNBUFFERED=1
  python3 -c 'import jax, flax, optax, torch, twinbench; print("twinbench on", jax.devices(), "jax", jax.__version__, "flax", flax.__version__, "torch", torch.__version__)'
}
_twinbench_tpu_setup() {  # the body, then its functions unset whatever it returned: the shell keeps none of them
  _twinbench_tpu_body
  local status=$?
  unset -f _twinbench_tpu_body _twinbench_missing _twinbench_tpu_setup
  return $status
}
_twinbench_tpu_setup
