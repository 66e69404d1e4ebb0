#!/usr/bin/env bash
# `pip install` of the repository as the README tells a user to: a fresh virtual environment from PYTHON (the
# system's python3), its pip upgraded from PyPI, then `pip install SOURCE_DIR` (build isolation: scikit-build-core
# and nanobind from PyPI build Tessel's C++ libraries into the module; the build folder goes to WORK_DIR so that the
# source tree stays untouched). Then the installed package, used from outside the source tree, must import, give
# A @ X within 1e-6 of a dense product, load the scheduler's names, and carry its type stubs.
#   pip_install.sh PYTHON SOURCE_DIR WORK_DIR
set -euo pipefail
python=$1 source=$2 work=$3
rm -rf "$work"
mkdir -p "$work"
start=$(date +%s)
"$python" -m venv "$work/venv"
pip=("$work/venv/bin/python" -m pip --disable-pip-version-check --no-cache-dir)
"${pip[@]}" install --quiet --upgrade pip
echo "venv and pip $("$work/venv/bin/python" -m pip --version | cut -d' ' -f2): $(($(date +%s) - start)) s"
t0=$(date +%s)
"${pip[@]}" install --quiet --config-settings=build-dir="$work/build" "$source"
echo "pip install $source: $(($(date +%s) - t0)) s"
site=$("$work/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
for stub in __init__ gnn moe sched; do
  test -f "$site/tessel/_tessel/$stub.pyi" || { echo "the type stub _tessel/$stub.pyi is missing from $site/tessel" >&2; exit 1; }
done
cd "$work"
"$work/venv/bin/python" - "$site" <<'PY'
import sys

import numpy as np

import tessel
import tessel.gnn as tg
import tessel.sched as ts

site = sys.argv[1]
assert tessel.__file__.startswith(site), f"imported {tessel.__file__}, not the installed package under {site}"
rng = np.random.default_rng(3)
n, f = 300, 8
dense = (rng.random((n, n)) < 0.03) * rng.uniform(0.5, 2.0, (n, n))
dense[7] = 0.0  # an empty row
dense = dense.astype(np.float32)
rows, cols = np.nonzero(dense)
indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=n))])
x = rng.standard_normal((n, f)).astype(np.float32)
ref = dense.astype(np.float64) @ x.astype(np.float64)
for algorithm in ("adaptive", "csr"):
    y = tg.SpmmHandle(tg.from_csr(indptr, cols, dense[rows, cols]), algorithm).apply(x)
    err = np.abs(y - ref).max() / np.abs(ref).max()
    assert err < 1e-6, (algorithm, err)
assert "crius" in ts.policy_names(), ts.policy_names()
print(f"installed tessel {tessel.__version__} from {tessel.__file__} works; relative error {err:.1e}")
PY
echo "pip_install.sh: $(($(date +%s) - start)) s in all"
