"""The peers a user would pick instead of Tessel's gnn, on the same graphs, widths and thread count.

  peers.py spmm --data G.h5 [G2.h5 ...] --features 16,64,256 [--reps 15] [--threads 1] --json OUT.json
      Y = A X with A the GCN operator D^-1/2 (A + I) D^-1/2 of each graph, built as Tessel builds it
      (gcn_normalize), fp32: scipy.sparse (`A @ X`), PyTorch (`torch.sparse.mm` on a CSR tensor), and PyTorch
      Geometric's GCN propagation (`GCNConv.propagate`, on edge_index and on a sparse adjacency). Each peer is
      checked against a double-precision product and timed in interleaved rounds (each sample a batch of >= 2 ms;
      the median of the samples is reported, as tessel-gnn-bench does).
  peers.py train --data cora.h5 [--epochs 200] [--seed 1] [--threads 1] --json OUT.json
      Kipf and Welling's GCN in PyTorch Geometric (2 layers, 16 hidden, dropout 0.5, Adam lr 0.01, weight decay
      5e-4 on the first layer, row-normalized features), the setup of `tessel-gnn train --model gcn`: per epoch
      one training step and one evaluation, as Tessel's epoch. PyG's example reads the features densely, as
      here. `--bias off` drops GCNConv's bias (PyG's default has one; Kipf and Welling's model and Tessel's do not).

Runs in the virtual environment of setup-venv.sh (the thread count is fixed before torch loads).
"""
import argparse
import json
import os
import sys
import time
import warnings


def parse():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("spmm")
    s.add_argument("--data", nargs="+", required=True)
    s.add_argument("--features", default="16,64,256")
    s.add_argument("--reps", type=int, default=15)
    s.add_argument("--threads", type=int, default=1)
    s.add_argument("--json", required=True)
    t = sub.add_parser("train")
    t.add_argument("--data", nargs="+", required=True)
    t.add_argument("--epochs", type=int, default=200)
    t.add_argument("--seed", type=int, default=1)
    t.add_argument("--threads", type=int, default=1)
    t.add_argument("--bias", choices=["on", "off"], default="on",
                   help="GCNConv's bias (PyG's default on; Kipf and Welling's model, and Tessel's, have none)")
    t.add_argument("--json", required=True)
    return p.parse_args()


args = parse()
for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[var] = str(args.threads)

import h5py  # noqa: E402
import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402
import torch  # noqa: E402
import torch_geometric  # noqa: E402
from torch_geometric.nn import GCNConv  # noqa: E402

torch.set_num_threads(args.threads)
warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta state")


def load_graph(path):
    """The adjacency of a Tessel data set (schema tessel.gnn.dataset) as scipy CSR, and its name."""
    with h5py.File(path, "r") as f:
        indptr = f["graph/indptr"][()].astype(np.int64)
        indices = f["graph/indices"][()].astype(np.int64)
        n = int(f["graph"].attrs["num_nodes"]) if "num_nodes" in f["graph"].attrs else len(indptr) - 1
        values = f["graph/values"][()].astype(np.float32) if "graph/values" in f else np.ones(len(indices), np.float32)
        name = f.attrs["name"] if "name" in f.attrs else os.path.basename(path)
    if isinstance(name, bytes):
        name = name.decode()
    return sp.csr_matrix((values, indices, indptr), shape=(n, n)), str(name)


def gcn_normalize(a):
    """D^-1/2 (A + I) D^-1/2 with duplicates merged, as Tessel's gcn_normalize (degrees in double)."""
    a = (a.astype(np.float64) + sp.identity(a.shape[0], dtype=np.float64, format="csr")).tocsr()
    a.sum_duplicates()
    a.sort_indices()
    dinv = 1.0 / np.sqrt(np.asarray(a.sum(axis=1)).ravel())
    return (sp.diags(dinv) @ a @ sp.diags(dinv)).tocsr().astype(np.float32)


def timed(fn, min_batch=2e-3):
    """Seconds of one call, from a batch of calls that lasts at least min_batch."""
    n = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        t = time.perf_counter() - t0
        if t >= min_batch:
            return t / n
        n = max(2 * n, int(n * 1.2 * min_batch / max(t, 1e-9)))


def spmm(a):
    features = [int(f) for f in a.features.split(",")]
    out = {"peers": "spmm", "threads": args.threads, "torch": torch.__version__,
           "torch_geometric": torch_geometric.__version__, "scipy": sp.__name__ and __import__("scipy").__version__,
           "cpu": cpu_model(), "results": []}
    for path in a.data:
        adj, name = load_graph(path)
        op = gcn_normalize(adj)
        n = op.shape[0]
        coo = op.tocoo()
        crow = torch.from_numpy(op.indptr.astype(np.int64))
        col = torch.from_numpy(op.indices.astype(np.int64))
        val = torch.from_numpy(op.data)
        a_torch = torch.sparse_csr_tensor(crow, col, val, size=(n, n), check_invariants=False)
        edge_index = torch.from_numpy(np.vstack([coo.col, coo.row]).astype(np.int64))  # source j -> target i
        edge_weight = torch.from_numpy(coo.data)
        conv = GCNConv(1, 1, normalize=False, bias=False)
        # PyG's sparse path takes the transposed adjacency (rows = targets): for Y = A X that is A itself.
        adj_t = a_torch
        for f in features:
            rng = np.random.default_rng(f)
            x_np = rng.standard_normal((n, f), dtype=np.float32)
            x = torch.from_numpy(x_np)
            ref = op.astype(np.float64) @ x_np.astype(np.float64)
            peers = {
                "scipy": lambda: op @ x_np,
                "torch_sparse_mm": lambda: torch.sparse.mm(a_torch, x),
                "pyg_edge_index": lambda: conv.propagate(edge_index, x=x, edge_weight=edge_weight),
                "pyg_sparse_adj": lambda: conv.propagate(adj_t, x=x, edge_weight=None),
            }
            errors = {}
            with torch.no_grad():
                for k, fn in peers.items():
                    y = fn()
                    y = y.numpy() if isinstance(y, torch.Tensor) else np.asarray(y)
                    errors[k] = float(np.max(np.abs(y - ref)) / max(np.max(np.abs(ref)), 1e-30))
                    if not errors[k] < 1e-4:
                        sys.exit(f"peers.py: {k} on {name} at F = {f}: relative error {errors[k]:.3g}, expected < 1e-4")
                samples = {k: [] for k in peers}
                keys = list(peers)
                for r in range(a.reps):
                    for k in (keys if r % 2 == 0 else keys[::-1]):  # interleaved, mirrored rounds
                        samples[k].append(timed(peers[k]))
            med = {k: 1e3 * float(np.median(v)) for k, v in samples.items()}
            row = {"dataset": name, "nodes": n, "nnz": int(op.nnz), "features": f, "median_ms": med,
                   "max_relative_error": errors}
            out["results"].append(row)
            print(f"{name} F={f}: " + ", ".join(f"{k} {v:.3f} ms" for k, v in med.items()), flush=True)
    return out


def load_planetoid(path):
    with h5py.File(path, "r") as f:
        adj, name = load_graph(path)
        n = adj.shape[0]
        if "features/dense" in f:
            x = f["features/dense"][()].astype(np.float32)
        else:
            width = int(f["features"].attrs["num_features"])
            x = sp.csr_matrix((f["features/data"][()].astype(np.float32), f["features/indices"][()],
                               f["features/indptr"][()]), shape=(n, width)).toarray()
        y = f["labels"][()].astype(np.int64)
        masks = [f[f"masks/{m}"][()].astype(bool) for m in ("train", "val", "test")]
        random = bool(f.attrs.get("features_random", 0))
    return name, adj, x, y, masks, random


class Gcn(torch.nn.Module):
    def __init__(self, fin, hidden, classes, bias):
        super().__init__()
        self.conv1 = GCNConv(fin, hidden, cached=True, bias=bias)
        self.conv2 = GCNConv(hidden, classes, cached=True, bias=bias)

    def forward(self, x, edge_index):
        x = torch.nn.functional.dropout(x, p=0.5, training=self.training)
        x = torch.relu(self.conv1(x, edge_index))
        x = torch.nn.functional.dropout(x, p=0.5, training=self.training)
        return self.conv2(x, edge_index)


def train(a):
    out = {"peers": "train", "threads": args.threads, "bias": a.bias, "torch": torch.__version__,
           "torch_geometric": torch_geometric.__version__, "cpu": cpu_model(), "results": []}
    for path in a.data:
        name, adj, x_np, y_np, masks, random = load_planetoid(path)
        torch.manual_seed(a.seed)
        rows = x_np.sum(axis=1, keepdims=True)
        x = torch.from_numpy(x_np / np.where(rows == 0, 1, rows))  # row-normalized (NormalizeFeatures)
        coo = adj.tocoo()
        edge_index = torch.from_numpy(np.vstack([coo.col, coo.row]).astype(np.int64))
        y = torch.from_numpy(y_np)
        train_m, val_m, test_m = (torch.from_numpy(m) for m in masks)
        model = Gcn(x.shape[1], 16, int(y_np.max()) + 1, a.bias == "on")
        opt = torch.optim.Adam([dict(params=model.conv1.parameters(), weight_decay=5e-4),
                                dict(params=model.conv2.parameters(), weight_decay=0)], lr=0.01)
        epoch_s = []
        for _ in range(a.epochs):
            t0 = time.perf_counter()
            model.train()
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x, edge_index)[train_m], y[train_m])
            loss.backward()
            opt.step()
            model.eval()
            with torch.no_grad():
                pred = model(x, edge_index).argmax(dim=1)
                val = float((pred[val_m] == y[val_m]).float().mean())
                test = float((pred[test_m] == y[test_m]).float().mean())
            epoch_s.append(time.perf_counter() - t0)
        row = {"dataset": name, "bias": a.bias, "epochs": a.epochs, "ms_per_epoch": 1e3 * float(np.mean(epoch_s)),
               "median_epoch_ms": 1e3 * float(np.median(epoch_s)), "total_seconds": float(np.sum(epoch_s)),
               "final_loss": loss.item(), "val_accuracy": val, "test_accuracy": test, "features_random": random}
        out["results"].append(row)
        print(f"{name}: PyG GCN {row['ms_per_epoch']:.2f} ms/epoch, {a.epochs} epochs {row['total_seconds']:.2f} s, "
              f"test accuracy {100 * test:.1f}%", flush=True)
    return out


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


result = spmm(args) if args.command == "spmm" else train(args)
tmp = args.json + ".tmp"
with open(tmp, "w") as f:
    json.dump(result, f, indent=1)
os.replace(tmp, args.json)
print(f"results written to {args.json}")
