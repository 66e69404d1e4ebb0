"""PyTorch Geometric's GCN with PyG's GCNConv or Tessel's (tessel.torch.gnn.GCNConv), nothing else changed.

  pyg_gcn.py --data G.h5 [G2.h5 ...] --layer pyg|tessel [--threads 1] [--epochs 200] [--seed 1] --json OUT.json

The model is PyG's GCN example (2 layers, 16 hidden, dropout 0.5, Adam lr 0.01, weight decay 5e-4 on the first
layer, row-normalized features, GCNConv with its defaults: bias, self-loops, symmetric normalization); an epoch is
one training step and one evaluation (forward without dropout), as in the example. Data sets are Tessel's HDF5
(schema tessel.gnn.dataset: datasets/gnn/planetoid_to_h5.py, tessel-gnn-data csv); labels of -1 and empty masks are
handled (graphs without a split: a fixed random 60/20/20 split from --seed). The first epoch, which builds and
tunes Tessel's handle of the graph (and PyG's caches), is timed separately from the median epoch.
"""
import argparse
import json
import os
import time


def parse():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", nargs="+", required=True)
    p.add_argument("--layer", choices=["pyg", "tessel"], required=True)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--epochs", type=int, default=200)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", required=True)
    return p.parse_args()


args = parse()
for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[var] = str(args.threads)

import h5py  # noqa: E402
import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

if args.layer == "pyg":
    from torch_geometric.nn import GCNConv  # noqa: E402
else:
    from tessel.torch.gnn import GCNConv  # noqa: E402

torch.set_num_threads(args.threads)


def load(path):
    """edge_index (source row 0, target row 1: row i of the stored CSR aggregates from its columns), dense float32
    features, labels and masks of a Tessel data set."""
    with h5py.File(path, "r") as f:
        indptr = f["graph/indptr"][()].astype(np.int64)
        indices = f["graph/indices"][()].astype(np.int64)
        n = len(indptr) - 1
        name = f.attrs.get("name", os.path.basename(path))
        random_features = bool(f.attrs.get("features_random", 0))
        if "features/dense" in f:
            x = f["features/dense"][()].astype(np.float32)
        elif "features" in f:
            width = int(f["features"].attrs["num_features"])
            x = sp.csr_matrix((f["features/data"][()].astype(np.float32), f["features/indices"][()],
                               f["features/indptr"][()]), shape=(n, width)).toarray()
        else:
            x = None
            random_features = True
        y = f["labels"][()].astype(np.int64) if "labels" in f else None
        masks = [f[f"masks/{m}"][()].astype(bool) if f"masks/{m}" in f else None for m in ("train", "val", "test")]
    rows = np.repeat(np.arange(n), np.diff(indptr))
    edge_index = np.vstack([indices, rows])
    name = name.decode() if isinstance(name, bytes) else str(name)
    return name, n, edge_index, x, y, masks, random_features


def prepare(path, seed):
    name, n, edge_index, x, y, masks, random_features = load(path)
    rng = np.random.default_rng(seed)
    if x is None:  # graphs without features (MUSAE's were not copied): fixed random features, as tessel-gnn-data's
        x = rng.random((n, 128), dtype=np.float32)
    if y is None or (y < 0).all():
        raise SystemExit(f"{path}: no labels to train on")
    labelled = np.flatnonzero(y >= 0)
    if any(m is None or not m.any() for m in masks):
        order = rng.permutation(labelled)
        cut = [int(0.6 * len(order)), int(0.8 * len(order))]
        masks = [np.zeros(n, bool) for _ in range(3)]
        for m, part in zip(masks, np.split(order, cut)):
            m[part] = True
    sums = x.sum(axis=1, keepdims=True)
    x = x / np.where(sums == 0, 1, sums)  # NormalizeFeatures
    classes = int(y.max()) + 1
    y = np.where(y < 0, 0, y)
    return name, torch.from_numpy(edge_index), torch.from_numpy(x), torch.from_numpy(y), \
        [torch.from_numpy(m) for m in masks], classes, random_features


class GCN(torch.nn.Module):
    def __init__(self, fin, hidden, classes):
        super().__init__()
        self.conv1 = GCNConv(fin, hidden)
        self.conv2 = GCNConv(hidden, classes)

    def forward(self, x, edge_index):
        x = F.dropout(x, p=0.5, training=self.training)
        x = F.relu(self.conv1(x, edge_index))
        x = F.dropout(x, p=0.5, training=self.training)
        return self.conv2(x, edge_index)


def run(path):
    name, edge_index, x, y, (train_m, val_m, test_m), classes, random_features = prepare(path, args.seed)
    torch.manual_seed(args.seed)
    model = GCN(x.shape[1], 16, classes)
    opt = torch.optim.Adam([dict(params=model.conv1.parameters(), weight_decay=5e-4),
                            dict(params=model.conv2.parameters(), weight_decay=0)], lr=0.01)
    epoch_s = []
    for _ in range(args.epochs):
        t0 = time.perf_counter()
        model.train()
        opt.zero_grad()
        loss = F.cross_entropy(model(x, edge_index)[train_m], y[train_m])
        loss.backward()
        opt.step()
        model.eval()
        with torch.no_grad():
            pred = model(x, edge_index).argmax(dim=1)
        epoch_s.append(time.perf_counter() - t0)
    test = float((pred[test_m] == y[test_m]).float().mean())
    val = float((pred[val_m] == y[val_m]).float().mean())
    row = {"dataset": name, "layer": args.layer, "threads": args.threads, "epochs": args.epochs, "seed": args.seed,
           "nodes": int(x.shape[0]), "edges": int(edge_index.shape[1]), "features": int(x.shape[1]),
           "random_features": random_features,
           "first_epoch_ms": 1e3 * epoch_s[0], "median_epoch_ms": 1e3 * float(np.median(epoch_s[1:])),
           "total_seconds": float(np.sum(epoch_s)), "test_accuracy": test, "val_accuracy": val}
    print(f"{name}: {args.layer} GCNConv, {args.threads} thread(s): {row['median_epoch_ms']:.2f} ms/epoch (first "
          f"{row['first_epoch_ms']:.0f} ms), test accuracy {100 * test:.1f}%", flush=True)
    return row


results = [run(p) for p in args.data]
with open(args.json, "w") as f:
    json.dump({"torch": torch.__version__, "results": results}, f, indent=1)
