"""Shared helpers of the Python package's tests (run by ctest with PYTHONPATH at the build tree's package)."""
import os
import pathlib

import numpy as np
import pytest


def data_dir():
    return pathlib.Path(os.environ.get("TESSEL_DATA_DIR", pathlib.Path(__file__).parents[3] / "shared" / "datasets"))


def build_dir():
    return pathlib.Path(os.environ.get("TESSEL_BUILD_DIR", pathlib.Path(__file__).parents[2] / "build" / "default"))


def relative_error(y, ref):
    """max |y - ref| / max |ref| (0 when both are zero)."""
    y = np.asarray(y, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    scale = np.abs(ref).max(initial=0.0)
    diff = np.abs(y - ref).max(initial=0.0)
    return diff / scale if scale > 0 else diff


def awkward_graph(n, density, seed, square=True):
    """A random CSR matrix with empty rows, self-loops, duplicate entries and a hub row (scipy COO -> CSR keeps
    the duplicates when built with has_canonical_format off)."""
    import scipy.sparse as sp

    rng = np.random.default_rng(seed)
    cols_n = n if square else n + 7
    nnz = int(n * cols_n * density)
    rows = rng.integers(0, n, nnz)
    cols = rng.integers(0, cols_n, nnz)
    rows = np.concatenate([rows, np.arange(0, n, 5), np.full(40, 3), rows[:20]])  # self-loops, a hub, duplicates
    cols = np.concatenate([cols, np.arange(0, n, 5) % cols_n, rng.integers(0, cols_n, 40), cols[:20]])
    keep = rows % 11 != 7  # empty rows
    vals = rng.uniform(0.1, 2.0, keep.sum()).astype(np.float32)
    indptr = np.zeros(n + 1, np.int64)
    order = np.lexsort((cols[keep], rows[keep]))
    np.add.at(indptr, rows[keep] + 1, 1)
    indptr = np.cumsum(indptr)
    return sp.csr_matrix((vals[order], cols[keep][order], indptr), shape=(n, cols_n))


@pytest.fixture(scope="session")
def cora_h5(tmp_path_factory):
    """Cora converted to Tessel's HDF5 schema by datasets/gnn/planetoid_to_h5.py (skipped without the data)."""
    import subprocess
    import sys

    src = data_dir() / "graphs" / "planetoid" / "cora"
    if not src.exists():
        pytest.skip(f"data set not found: {src} (set TESSEL_DATA_DIR)")
    out = tmp_path_factory.mktemp("cora") / "cora.h5"
    script = pathlib.Path(__file__).parents[2] / "datasets" / "gnn" / "planetoid_to_h5.py"
    # Debian's Python has h5py (scripts/deps installs python3-h5py).
    python = "/usr/bin/python3" if pathlib.Path("/usr/bin/python3").exists() else sys.executable
    subprocess.run([python, str(script), "--dir", str(src), "--name", "cora", "--out", str(out)], check=True,
                   stdout=subprocess.DEVNULL)
    return out
