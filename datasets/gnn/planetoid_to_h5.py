#!/usr/bin/python3
"""Converts Planetoid raw files (ind.<name>.{x,y,tx,ty,allx,ally,graph,test.index}) to a tessel.gnn.graph file.

    planetoid_to_h5.py --dir ../shared/datasets/graphs/planetoid/cora --name cora --out cora.h5

The split, feature layout and label layout follow Kipf & Welling's gcn/utils.py load_data: train = the first
len(y) nodes, val = the next 500, test = the sorted ids of ind.<name>.test.index; test rows are moved to the ids
in test.index; CiteSeer's 15 test ids without a feature row get zero features and label -1 (unlabelled).

The ind.* files are Python 2 pickles. They are read with a restricted unpickler: only the six globals these files
use are resolved (numpy's array reconstruction, ndarray, dtype, defaultdict, list, and scipy's csr_matrix, the
latter to an inert stand-in that just keeps its state); any other global raises, so no code from the file runs.
When ind.<name>.allx is missing (PubMed here), features are uniform random and the file is marked
features_random=1: such a data set is for timing only.
"""
import argparse
import collections
import os
import pickle
import sys

import h5py
import numpy as np


class CsrStandIn:
    """Receives a pickled scipy csr_matrix's state without running scipy code."""

    def __setstate__(self, state):
        self.state = state

    def to_dense(self, what):
        s = self.state
        for key in ("indptr", "indices", "data", "_shape"):
            if key not in s:
                raise ValueError(f"{what}: pickled csr_matrix lacks '{key}'")
        rows, cols = (int(v) for v in s["_shape"])
        indptr = np.asarray(s["indptr"], dtype=np.int64)
        indices = np.asarray(s["indices"], dtype=np.int64)
        data = np.asarray(s["data"], dtype=np.float32)
        if indptr.shape != (rows + 1,) or indptr[0] != 0 or np.any(np.diff(indptr) < 0) or indptr[-1] != len(indices):
            raise ValueError(f"{what}: indptr of a {rows} x {cols} csr_matrix is malformed")
        if len(indices) and (indices.min() < 0 or indices.max() >= cols):
            raise ValueError(f"{what}: column index out of range [0, {cols})")
        out = np.zeros((rows, cols), dtype=np.float32)
        for r in range(rows):
            out[r, indices[indptr[r]:indptr[r + 1]]] += data[indptr[r]:indptr[r + 1]]
        return out


class DefaultDictStandIn(dict):
    """collections.defaultdict(list) as a plain dict (the factory is never called)."""

    def __init__(self, *args):
        super().__init__()


ALLOWED = {
    ("numpy.core.multiarray", "_reconstruct"): np.core.multiarray._reconstruct,
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
    ("collections", "defaultdict"): DefaultDictStandIn,
    ("__builtin__", "list"): list,
    ("scipy.sparse.csr", "csr_matrix"): CsrStandIn,
}


class RestrictedUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        try:
            return ALLOWED[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(f"global '{module}.{name}' is not allowed in a Planetoid file") from None


def load_pickle(path):
    with open(path, "rb") as f:
        return RestrictedUnpickler(f, encoding="latin1").load()


def as_dense(obj, what):
    if isinstance(obj, CsrStandIn):
        return obj.to_dense(what)
    arr = np.asarray(obj)
    if arr.dtype == object or arr.ndim != 2:
        raise ValueError(f"{what}: expected a 2-D numeric array, got {arr.dtype} with shape {arr.shape}")
    return arr.astype(np.float32)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", required=True, help="folder holding ind.<name>.*")
    ap.add_argument("--name", required=True, help="cora, citeseer or pubmed")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0, help="seed of the random features when allx is missing")
    a = ap.parse_args()

    def part(p):
        return os.path.join(a.dir, f"ind.{a.name}.{p}")

    y = as_dense(load_pickle(part("y")), "y")
    tx = as_dense(load_pickle(part("tx")), "tx")
    ty = as_dense(load_pickle(part("ty")), "ty")
    ally = as_dense(load_pickle(part("ally")), "ally")
    graph = load_pickle(part("graph"))
    if not isinstance(graph, dict):
        raise ValueError(f"{part('graph')}: expected a dict of adjacency lists")
    with open(part("test.index")) as f:
        test_idx_reorder = [int(line) for line in f if line.strip()]
    test_idx_range = np.sort(test_idx_reorder)
    have_allx = os.path.exists(part("allx"))
    allx = as_dense(load_pickle(part("allx")), "allx") if have_allx else None
    width = tx.shape[1]

    n_train_val = ally.shape[0]
    # CiteSeer: some test ids have no row; extend tx/ty over the whole id range (Kipf's tx_extended).
    full = np.arange(test_idx_range.min(), test_idx_range.max() + 1)
    tx_ext = np.zeros((len(full), width), dtype=np.float32)
    ty_ext = np.zeros((len(full), ty.shape[1]), dtype=np.float32)
    tx_ext[test_idx_range - test_idx_range.min(), :] = tx
    ty_ext[test_idx_range - test_idx_range.min(), :] = ty
    n = n_train_val + len(full)

    if have_allx:
        features = np.vstack((allx, tx_ext))
        features[test_idx_reorder, :] = features[test_idx_range, :]
        random = False
    else:
        rng = np.random.default_rng(a.seed)
        features = rng.random((n, width), dtype=np.float32)
        random = True
    onehot = np.vstack((ally, ty_ext))
    onehot[test_idx_reorder, :] = onehot[test_idx_range, :]
    labels = np.where(onehot.sum(axis=1) > 0, onehot.argmax(axis=1), -1).astype(np.int32)

    # Symmetric adjacency with duplicates merged (networkx.from_dict_of_lists + adjacency_matrix).
    pairs = set()
    for i, neigh in graph.items():
        for j in neigh:
            i, j = int(i), int(j)
            if not (0 <= i < n and 0 <= j < n):
                raise ValueError(f"{part('graph')}: edge ({i}, {j}) is out of range [0, {n})")
            pairs.add((i, j))
            pairs.add((j, i))
    pairs = np.array(sorted(pairs), dtype=np.int64).reshape(-1, 2)
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.add.at(indptr, pairs[:, 0] + 1, 1)
    indptr = np.cumsum(indptr)
    indices = pairs[:, 1].astype(np.int32)

    train = np.zeros(n, dtype=np.uint8)
    val = np.zeros(n, dtype=np.uint8)
    test = np.zeros(n, dtype=np.uint8)
    train[: y.shape[0]] = 1
    val[y.shape[0]: y.shape[0] + 500] = 1
    test[test_idx_range] = 1
    for mask, what in ((train, "train"), (val, "val"), (test, "test")):
        missing = np.count_nonzero(mask & (labels < 0))
        if missing:
            print(f"warning: {missing} {what} nodes have no label; dropped from the mask", file=sys.stderr)
            mask[labels < 0] = 0

    with h5py.File(a.out, "w") as f:
        f.attrs["schema"] = "tessel.gnn.graph"
        f.attrs["schema_version"] = np.int32(1)
        f.attrs["name"] = a.name
        src = f"Planetoid raw files ind.{a.name}.* (tkipf/gcn), converted by planetoid_to_h5.py"
        if random:
            src += f"; ind.{a.name}.allx missing: features are uniform random (seed {a.seed}), timing only"
        f.attrs["source"] = src
        f.attrs["num_classes"] = np.int32(onehot.shape[1])
        f.attrs["directed"] = np.int32(0)
        f.attrs["features_random"] = np.int32(1 if random else 0)
        g = f.create_group("graph")
        g.attrs["num_nodes"] = np.int64(n)
        g.create_dataset("indptr", data=indptr)
        g.create_dataset("indices", data=indices)
        f.create_dataset("features/dense", data=features.astype(np.float32), compression="gzip")
        f.create_dataset("labels", data=labels)
        f.create_dataset("masks/train", data=train)
        f.create_dataset("masks/val", data=val)
        f.create_dataset("masks/test", data=test)
    print(f"wrote {a.out}: {n} nodes, {len(indices)} entries, {width} features{' (random)' if random else ''}, "
          f"{onehot.shape[1]} classes, train {train.sum()}, val {val.sum()}, test {test.sum()}")


if __name__ == "__main__":
    main()
