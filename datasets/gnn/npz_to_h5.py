#!/usr/bin/python3
"""Converts a gnn-benchmark .npz graph (adj_*, attr_*, labels) to a tessel.gnn.graph file.

    npz_to_h5.py --npz ../shared/datasets/graphs/npz/cora.npz --name cora-npz --out cora_npz.h5 [--symmetrize]

The archive is opened with allow_pickle=False. The adjacency is stored as given (directed citation links) unless
--symmetrize; features stay sparse (features/indptr, indices, data). The npz files carry no split: a
Planetoid-style one is drawn (--per-class training nodes per class, then --val and --test nodes, seeded).
"""
import argparse

import h5py
import numpy as np


def csr(npz, prefix, what):
    indptr = np.asarray(npz[f"{prefix}_indptr"], dtype=np.int64)
    indices = np.asarray(npz[f"{prefix}_indices"], dtype=np.int64)
    data = np.asarray(npz[f"{prefix}_data"], dtype=np.float32)
    shape = tuple(int(v) for v in npz[f"{prefix}_shape"])
    if indptr.shape != (shape[0] + 1,) or indptr[0] != 0 or np.any(np.diff(indptr) < 0) or indptr[-1] != len(indices):
        raise ValueError(f"{what}: {prefix}_indptr is malformed for shape {shape}")
    if len(indices) and (indices.min() < 0 or indices.max() >= shape[1]):
        raise ValueError(f"{what}: {prefix}_indices out of range [0, {shape[1]})")
    return indptr, indices, data, shape


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--npz", required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--symmetrize", action="store_true")
    ap.add_argument("--per-class", type=int, default=20)
    ap.add_argument("--val", type=int, default=500)
    ap.add_argument("--test", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()

    with np.load(a.npz, allow_pickle=False) as z:
        indptr, indices, data, shape = csr(z, "adj", a.npz)
        fptr, fidx, fval, fshape = csr(z, "attr", a.npz)
        labels = np.asarray(z["labels"], dtype=np.int64)
    n = shape[0]
    if shape[0] != shape[1] or fshape[0] != n or labels.shape != (n,):
        raise ValueError(f"{a.npz}: adjacency {shape}, features {fshape}, labels {labels.shape} disagree")
    rows = np.repeat(np.arange(n), np.diff(indptr))
    cols = indices
    if a.symmetrize:
        rows, cols = np.concatenate((rows, cols)), np.concatenate((cols, rows))
    pairs = np.unique(np.stack((rows, cols), axis=1), axis=0)
    aptr = np.zeros(n + 1, dtype=np.int64)
    np.add.at(aptr, pairs[:, 0] + 1, 1)
    aptr = np.cumsum(aptr)
    num_classes = int(labels.max()) + 1

    rng = np.random.default_rng(a.seed)
    order = rng.permutation(n)
    train = np.zeros(n, dtype=np.uint8)
    val = np.zeros(n, dtype=np.uint8)
    test = np.zeros(n, dtype=np.uint8)
    taken = np.zeros(num_classes, dtype=np.int64)
    rest = []
    for i in order:
        if taken[labels[i]] < a.per_class:
            taken[labels[i]] += 1
            train[i] = 1
        else:
            rest.append(i)
    val[rest[: a.val]] = 1
    test[rest[a.val: a.val + a.test]] = 1

    with h5py.File(a.out, "w") as f:
        f.attrs["schema"] = "tessel.gnn.graph"
        f.attrs["schema_version"] = np.int32(1)
        f.attrs["name"] = a.name
        f.attrs["source"] = f"{a.npz} (gnn-benchmark npz) converted by npz_to_h5.py" + (
            ", symmetrized" if a.symmetrize else ", directed as stored")
        f.attrs["num_classes"] = np.int32(num_classes)
        f.attrs["directed"] = np.int32(0 if a.symmetrize else 1)
        f.attrs["features_random"] = np.int32(0)
        g = f.create_group("graph")
        g.attrs["num_nodes"] = np.int64(n)
        g.create_dataset("indptr", data=aptr)
        g.create_dataset("indices", data=pairs[:, 1].astype(np.int32))
        fg = f.create_group("features")
        fg.attrs["num_features"] = np.int64(fshape[1])
        fg.create_dataset("indptr", data=fptr)
        fg.create_dataset("indices", data=fidx.astype(np.int32))
        fg.create_dataset("data", data=fval)
        f.create_dataset("labels", data=labels.astype(np.int32))
        f.create_dataset("masks/train", data=train)
        f.create_dataset("masks/val", data=val)
        f.create_dataset("masks/test", data=test)
    print(f"wrote {a.out}: {n} nodes, {len(pairs)} entries, {fshape[1]} sparse features, {num_classes} classes")


if __name__ == "__main__":
    main()
