#!/usr/bin/env bash
# Creates the peers' virtual environment under the build tree: PyTorch (CPU wheels), PyTorch Geometric, h5py and
# scipy. Only the peer benchmarks use it; the library and its tests never do.
#
#   benchmarks/gnn/peers/setup-venv.sh [VENV_DIR]        (default build/default/peers-venv)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
venv=${1:-$root/build/default/peers-venv}
if [[ ! -x "$venv/bin/python" ]]; then
  /usr/bin/python3 -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --upgrade pip
# From PyPI (the only index this needs); PyPI's Linux wheels bring CUDA runtimes along, unused by these CPU runs.
"$venv/bin/python" -m pip install --quiet torch torch_geometric scipy h5py numpy
"$venv/bin/python" - <<'PY'
import torch, torch_geometric, scipy, h5py
print("peers:", "torch", torch.__version__, "torch_geometric", torch_geometric.__version__, "scipy", scipy.__version__)
PY
