"""Y = A X through the Python binding, timed as tessel-gnn-bench times it, on the same graph and width.

  binding_overhead.py --data G.h5 [--features 64] [--kernels csr,adaptive] [--operator raw|gcn] [--reps 15]
                      --json OUT.json

The graph is read from the data set's HDF5 file as the bench reads it (--operator raw: A as stored; gcn: D^-1/2
(A + I) D^-1/2 in double, as Tessel builds it); the handle is built with the bench's options for one width (timing
off: the cost model's plan, deterministic) and applied from Python with NumPy arrays: `handle.apply(x, out=y,
ordered=True)` for adaptive (X and Y in the handle's vertex order, as the bench keeps them), plain `apply` for the
single kernels. X and Y are 64-byte aligned as Kokkos's allocations are (--arrays; NumPy's own are 16-byte aligned,
so a 256-byte row spans five cache lines instead of four). Each handle first runs until it is tuned, then 3 warm-up applies; each of --reps rounds runs the
kernels in a shuffled order, one untimed apply, then a timed batch of >= 2 ms (the batch size fixed from one apply),
and records the time per apply; the median over the rounds is reported, as tessel-gnn-bench does.
"""
import argparse
import json
import math
import os
import random
import time


def parse():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True)
    p.add_argument("--features", type=int, default=64)
    p.add_argument("--kernels", default="csr,adaptive")
    p.add_argument("--operator", choices=["raw", "gcn"], default="raw")
    p.add_argument("--reps", type=int, default=15)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--arrays", choices=["numpy", "aligned", "torch"], default="aligned",
                   help="X and Y as NumPy's own allocations (16-byte aligned), NumPy arrays on 64-byte boundaries (as "
                        "Kokkos allocates), or PyTorch tensors (64-byte aligned by PyTorch's allocator)")
    p.add_argument("--json", required=True)
    return p.parse_args()


args = parse()
os.environ.setdefault("OMP_NUM_THREADS", "1")

import h5py  # noqa: E402
import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402

if args.arrays == "torch":
    import torch  # noqa: E402, F401  (before tessel: see python/README.md, "Limits")

import tessel.gnn as tg  # noqa: E402


def operator(path, kind):
    with h5py.File(path, "r") as f:
        indptr = f["graph/indptr"][()].astype(np.int64)
        indices = f["graph/indices"][()].astype(np.int64)
        values = f["graph/values"][()].astype(np.float32) if "graph/values" in f else np.ones(len(indices), np.float32)
    n = len(indptr) - 1
    a = sp.csr_matrix((values, indices, indptr), shape=(n, n))
    if kind == "gcn":
        a = (a.astype(np.float64) + sp.identity(n, dtype=np.float64, format="csr")).tocsr()
        a.sum_duplicates()
        a.sort_indices()
        dinv = 1.0 / np.sqrt(np.asarray(a.sum(axis=1)).ravel())
        a = (sp.diags(dinv) @ a @ sp.diags(dinv)).tocsr().astype(np.float32)
    return a


def array(values):
    """A copy of values allocated as --arrays says."""
    if args.arrays == "torch":
        import torch

        return torch.from_numpy(values).clone()
    if args.arrays == "numpy":
        return values.copy()
    raw = np.empty(values.nbytes + 64, np.uint8)
    start = (-raw.ctypes.data) % 64
    out = raw[start:start + values.nbytes].view(values.dtype).reshape(values.shape)
    out[...] = values
    return out


a = operator(args.data, args.operator)
n, f = a.shape[0], args.features
rng = np.random.default_rng(1)
x = rng.standard_normal((n, f)).astype(np.float32)
ref = a.astype(np.float64) @ x.astype(np.float64)
entries = []
for k in args.kernels.split(","):
    h = tg.SpmmHandle(a, k, timing=False, probe_features=[f])
    ordered = k == "adaptive"
    perm = np.asarray(h.permutation) if ordered else None
    xin = array(np.ascontiguousarray(x[perm]) if ordered else x)
    y = array(np.zeros((n, f), np.float32))

    def apply(h=h, xin=xin, y=y, ordered=ordered):
        h.apply(xin, out=y, ordered=ordered)

    tuning = 0
    while not h.tuned(f) and tuning < 1000:
        apply()
        tuning += 1
    for _ in range(args.warmup):
        apply()
    t0 = time.perf_counter()
    apply()
    inner = int(min(1000, max(1, math.ceil(2e-3 / max(time.perf_counter() - t0, 1e-9)))))
    got = np.empty((n, f), np.float32)
    if ordered:
        got[perm] = np.asarray(y)
    else:
        got[:] = np.asarray(y)
    err = float(np.abs(got - ref).max() / np.abs(ref).max())
    assert err < 1e-5, (k, err)
    entries.append(dict(kernel=k, apply=apply, inner=inner, times=[], error=err))

order = list(range(len(entries)))
shuffle = random.Random(12345)
for _ in range(args.reps):
    shuffle.shuffle(order)
    for i in order:
        e = entries[i]
        e["apply"]()
        t0 = time.perf_counter()
        for _ in range(e["inner"]):
            e["apply"]()
        e["times"].append((time.perf_counter() - t0) / e["inner"])

out = {"data": args.data, "arrays": args.arrays, "nodes": n, "nnz": int(a.nnz), "features": f, "operator": args.operator, "reps": args.reps,
       "median_ms": {e["kernel"]: 1e3 * float(np.median(e["times"])) for e in entries},
       "inner": {e["kernel"]: e["inner"] for e in entries}, "error": {e["kernel"]: e["error"] for e in entries}}
print(f"{os.path.basename(args.data)} ({args.arrays}) n={n} nnz={a.nnz} F={f}: " +
      ", ".join(f"{k} {v:.4f} ms" for k, v in out["median_ms"].items()), flush=True)
with open(args.json, "w") as fh:
    json.dump(out, fh, indent=1)
