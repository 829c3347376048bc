#!/usr/bin/env bash
# `make setup` (and so `make bench` and `make test`): one rule for the venv, run every time and
# cheap when nothing changed.
#
# The venv is built from /usr/bin/python3 with its site-packages where that Python imports
# Debian's pyverbs (the RDMA benchmarks need it, and it exists for no other Python), else from
# `python3`; PYTHON=... overrides. It is (re)built whenever what it was built against changes:
# the Python, whether pyverbs, the libibverbs and callgrind headers, Python.h and a compiler were
# there (the compiled data planes are optional extensions: a venv built without the headers has
# none, and must be rebuilt once they appear; without callgrind.h the RDMA loops cannot be
# counted), pyproject.toml, the C sources and the torch spec.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}

if [ -z "${PYTHON:-}" ]; then
  if /usr/bin/python3 -c 'import pyverbs, ensurepip' >/dev/null 2>&1; then PYTHON=/usr/bin/python3
  else PYTHON=python3; fi
fi
command -v "$PYTHON" >/dev/null || { echo "setup: no Python '$PYTHON' (PYTHON=... names one)"; exit 2; }
pyexe=$("$PYTHON" -c 'import os, sys; print(os.path.realpath(sys.executable))')
# torch for the collectives (gloo on CPU, nccl on GPUs) and the GPU feed; TORCH_SPEC= skips it
# (coll.* and gpu.* then skip with the reason). A torch the base Python already has (a GPU
# machine's CUDA build) is kept, seen through --system-site-packages; otherwise torch==2.13.0
# resolves to the CPU build this project's machines carry.
if [ -z "${TORCH_SPEC+set}" ]; then
  if "$PYTHON" -c 'import torch' >/dev/null 2>&1; then TORCH_SPEC=""; else TORCH_SPEC=torch==2.13.0; fi
fi
have() { if "$@" >/dev/null 2>&1; then echo yes; else echo no; fi; }
include=$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
key=$(cat <<EOF
python $pyexe $("$PYTHON" -c 'import sys; print(sys.version.split()[0])')
pyverbs $(have "$PYTHON" -c 'import pyverbs')
verbs.h $(have test -e /usr/include/infiniband/verbs.h)
callgrind.h $(have test -e /usr/include/valgrind/callgrind.h)
Python.h $(have test -e "$include/Python.h")
cc $(have command -v gcc)
torch ${TORCH_SPEC:-kept}
sources $(cat pyproject.toml netbench/benchmarks/tcp/_fastloop.c netbench/benchmarks/rdma/_verbsloop.c | sha256sum | cut -c1-16)
EOF
)
KEYFILE=$VENV/.netbench-built-against
if [ -f "$KEYFILE" ] && [ -x "$VENV/bin/python" ] && [ "$(cat "$KEYFILE")" = "$key" ]; then
  exit 0
fi
if [ -f "$KEYFILE" ] || [ -d "$VENV" ]; then
  old=$(head -1 "$KEYFILE" 2>/dev/null || echo "python unknown")
  if [ "$old" != "$(echo "$key" | head -1)" ]; then
    echo "setup: rebuilding $VENV from $pyexe (it was built from ${old#python })"
    rm -rf "$VENV"
  else
    echo "setup: reinstalling into $VENV: what it was built against changed"
  fi
fi
test -x "$VENV/bin/python" || "$PYTHON" -m venv --system-site-packages "$VENV"
# shellcheck disable=SC2086
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -e '.[test]' $TORCH_SPEC
echo "$key" > "$KEYFILE"
