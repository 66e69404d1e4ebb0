#!/usr/bin/env bash
# pip install of the repository into a fresh folder (no build isolation: the given Python's scikit-build-core and
# nanobind build it), then a check that the installed package imports and computes.
#   pip_install.sh PYTHON SOURCE_DIR WORK_DIR
set -euo pipefail
python=$1 source=$2 work=$3
rm -rf "$work/site"
mkdir -p "$work"
start=$(date +%s)
"$python" -m pip install --quiet --no-build-isolation --no-deps --target "$work/site" \
  --config-settings=build-dir="$work/build" --config-settings=cmake.define.Tessel_ENABLE_CUDA=OFF "$source"
echo "pip install: $(($(date +%s) - start)) s"
ls "$work/site/tessel"
test -f "$work/site/tessel/_tessel/gnn.pyi" || { echo "the type stubs are missing from the install" >&2; exit 1; }
cd "$work"
PYTHONPATH="$work/site" "$python" - <<'PY'
import numpy as np
import scipy.sparse as sp
import tessel
import tessel.gnn as tg
import tessel.sched as ts

assert tessel.__file__.startswith(__import__("os").environ["PYTHONPATH"]), tessel.__file__
a = sp.random(200, 200, density=0.05, format="csr", dtype=np.float32, random_state=3)
x = np.random.default_rng(1).standard_normal((200, 8)).astype(np.float32)
y = tg.SpmmHandle(a, "adaptive").apply(x)
err = np.abs(y - a @ x).max() / np.abs(a @ x).max()
assert err < 1e-6, err
assert "crius" in ts.policy_names()
print("installed tessel", tessel.__version__, "from", tessel.__file__, "works; relative error", err)
PY
