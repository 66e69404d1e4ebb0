"""Graph aggregation ``Y = A X`` with AdaptGear's density-adaptive kernels, and GCN / GIN training.

Graphs come from CSR arrays, SciPy sparse matrices, PyTorch sparse tensors or a PyTorch Geometric ``edge_index``
(:func:`as_graph`); they are copied once into Tessel. Feature matrices are used in place (zero-copy) when they are
C-contiguous float32 arrays on the CPU, whatever library they come from (NumPy, PyTorch, anything with DLPack).

>>> import numpy as np, scipy.sparse as sp, tessel.gnn as tg
>>> a = sp.random(1000, 1000, density=0.01, format="csr", dtype=np.float32)
>>> h = tg.SpmmHandle(a, algorithm="adaptive")
>>> y = h.apply(np.ones((1000, 64), np.float32))          # = a @ x
"""
import json

import numpy as np

from . import _tessel

_g = _tessel.gnn

Graph = _g.Graph
Dataset = _g.Dataset
SpmmOptions = _g.SpmmOptions
algorithms = _g.algorithms
metis_available = _g.metis_available

__all__ = ["Graph", "Dataset", "SpmmHandle", "SpmmOptions", "algorithms", "as_graph", "from_csr", "from_scipy",
           "from_torch", "from_edge_index", "load_dataset", "make_dataset", "train"]


def _is_torch(x):
    return type(x).__module__.split(".")[0] == "torch"


def _numpy(x):
    """A NumPy view or copy of an array-like (torch tensors are detached and moved to the CPU)."""
    if _is_torch(x):
        x = x.detach()
        if x.device.type != "cpu":
            x = x.cpu()
        return x.numpy()
    return np.asarray(x)


def from_csr(indptr, indices, values=None, num_cols=None, name="graph"):
    """A graph from CSR arrays: row ``i`` aggregates from ``indices[indptr[i]:indptr[i+1]]`` with ``values``
    (all ones when omitted); ``num_cols`` defaults to the number of rows (a square adjacency)."""
    return Graph.from_csr(_numpy(indptr), _numpy(indices), None if values is None else _numpy(values), num_cols, name)


def from_scipy(matrix, name="graph"):
    """A graph from any SciPy sparse matrix or array (converted to CSR; duplicates kept as separate entries)."""
    csr = matrix.tocsr()
    return Graph.from_csr(csr.indptr, csr.indices, csr.data, csr.shape[1], name)


def from_torch(tensor, name="graph"):
    """A graph from a PyTorch sparse tensor (CSR, or COO which is coalesced): row ``i`` of the tensor is row ``i``
    of the adjacency."""
    import torch

    t = tensor.detach().cpu()
    if t.layout == torch.sparse_coo:
        t = t.coalesce().to_sparse_csr()
    if t.layout != torch.sparse_csr:
        raise TypeError(f"from_torch: expected a sparse CSR or COO tensor, got layout {t.layout}")
    return Graph.from_csr(t.crow_indices().numpy(), t.col_indices().numpy(), t.values().numpy(), t.shape[1], name)


def edge_index_to_csr(edge_index, num_nodes=None, edge_weight=None):
    """CSR arrays ``(indptr, indices, values)`` of PyTorch Geometric's ``edge_index`` (2 x E, source row 0, target
    row 1): row ``i`` holds the sources of the edges into ``i`` (messages flow source -> target), sorted by source;
    duplicate edges stay separate entries, as PyG sums them."""
    ei = _numpy(edge_index)
    if ei.ndim != 2 or ei.shape[0] != 2:
        raise ValueError(f"edge_index must have shape (2, E), got {tuple(ei.shape)}")
    if ei.dtype.kind not in "iu":
        raise TypeError(f"edge_index must hold integers, got {ei.dtype}")
    src, dst = ei[0].astype(np.int64), ei[1].astype(np.int64)
    if num_nodes is None:
        num_nodes = int(max(src.max(initial=-1), dst.max(initial=-1)) + 1)
    if src.size and (min(src.min(), dst.min()) < 0 or max(src.max(), dst.max()) >= num_nodes):
        raise ValueError(f"edge_index holds vertex ids outside [0, {num_nodes})")
    order = np.lexsort((src, dst))
    indptr = np.zeros(num_nodes + 1, np.int64)
    np.add.at(indptr, dst + 1, 1)
    np.cumsum(indptr, out=indptr)
    values = None
    if edge_weight is not None:
        w = _numpy(edge_weight)
        if w.shape != (src.size,):
            raise ValueError(f"edge_weight must have shape ({src.size},), got {tuple(w.shape)}")
        values = np.ascontiguousarray(w[order], dtype=np.float32)
    return indptr, np.ascontiguousarray(src[order]), values, num_nodes


def from_edge_index(edge_index, num_nodes=None, edge_weight=None, name="graph"):
    """A graph from PyTorch Geometric's ``edge_index`` (see :func:`edge_index_to_csr`)."""
    indptr, indices, values, n = edge_index_to_csr(edge_index, num_nodes, edge_weight)
    return Graph.from_csr(indptr, indices, values, n, name)


def as_graph(obj, name="graph"):
    """A :class:`Graph` from a Graph, a SciPy sparse matrix, a PyTorch sparse tensor, an ``edge_index`` (2 x E
    integer array or tensor) or a tuple ``(indptr, indices[, values])``."""
    if isinstance(obj, Graph):
        return obj
    if hasattr(obj, "tocsr"):
        return from_scipy(obj, name)
    if _is_torch(obj) and obj.layout != __import__("torch").strided:
        return from_torch(obj, name)
    if isinstance(obj, tuple):
        return from_csr(*obj, name=name)
    return from_edge_index(obj, name=name)


class SpmmHandle:
    """``Y = A X`` for a fixed adjacency ``A`` with one algorithm (``adaptive``, ``csr``, ``csr_feature_tiled``,
    ``coo``, ``coo_atomic``, ``tiles``, ``dense``, ``kk``), in the manner of Kokkos Kernels' SPMVHandle.

    ``adaptive`` (AdaptGear) may reorder the vertices and times candidate kernels during its first applies at each
    width (every result is exact); :meth:`apply` takes and returns rows in the graph's own order regardless (rows
    are permuted in and out only when the handle reordered). ``apply(x, ordered=True)`` skips that for callers who
    keep their data in the handle's order (:attr:`permutation`).
    """

    def __init__(self, graph, algorithm="adaptive", *, timing=True, tuning_repeats=2, partition="auto",
                 part_size=0, class_bounds=None, probe_features=None, dense_max_bytes=1 << 30, coo_chunk=4096,
                 seed=1):
        self.graph = as_graph(graph)
        options = SpmmOptions(algorithm, timing, tuning_repeats, partition, part_size, class_bounds,
                              probe_features, dense_max_bytes, coo_chunk, seed)
        self._h = _g.SpmmHandle(self.graph, options)

    @property
    def shape(self):
        return (self._h.rows, self._h.cols)

    @property
    def algorithm(self):
        return self._h.algorithm

    @property
    def permutation(self):
        """``old_of_new``: the original vertex at each row of the handle's order."""
        return self._h.permutation

    def _out(self, x, rows, out):
        if out is not None:
            return out
        if len(np.shape(x)) != 2:
            return np.empty((rows, 0), np.float32)  # the binding names what X should have been
        if _is_torch(x):
            import torch

            return torch.empty((rows, x.shape[1]), dtype=x.dtype, device=x.device)
        return np.empty((rows, np.shape(x)[1]), dtype=getattr(x, "dtype", np.float32))

    def apply(self, x, out=None, *, ordered=False):
        """``A @ x`` into ``out`` (allocated like ``x`` when omitted) and returned. ``x``: (num_cols, F) float32,
        C-contiguous, on the CPU; NumPy, PyTorch or any DLPack array (never copied)."""
        y = self._out(x, self._h.rows, out)
        self._h.apply(x.detach() if _is_torch(x) else x, y, False, ordered)
        return y

    def apply_transpose(self, x, out=None, *, ordered=False):
        """``A^T @ x`` (the backward of :meth:`apply`); the handle of ``A^T`` is built on first use (the same handle
        when ``A`` is symmetric)."""
        y = self._out(x, self._h.cols, out)
        self._h.apply(x.detach() if _is_torch(x) else x, y, True, ordered)
        return y

    def __matmul__(self, x):
        return self.apply(x)

    def tuned(self, features):
        return self._h.tuned(features)

    def plan(self, features):
        """The plan for width ``features`` as a dict (which kernel for which blocks, and why)."""
        return json.loads(self._h.plan(features))

    def plans(self):
        return [json.loads(p) for p in self._h.plans()]

    def save_plans(self, path):
        self._h.save_plans(str(path))

    @property
    def overhead_seconds(self):
        """Preprocessing and tuning time spent so far (the selection overhead)."""
        return self._h.overhead_seconds

    def __repr__(self):
        return f"SpmmHandle({self._h.rows} x {self._h.cols}, nnz={self.graph.nnz}, algorithm={self.algorithm})"


def load_dataset(path):
    """A data set in Tessel's ``tessel.gnn.graph`` HDF5 schema (datasets/README.md), validated."""
    return Dataset.load(str(path))


def make_dataset(graph, features=None, labels=None, num_classes=None, train_mask=None, val_mask=None,
                 test_mask=None, name="data", directed=False):
    """A data set from arrays: a graph (anything :func:`as_graph` takes), float32 features (n x F), integer labels
    (-1 = unlabelled) and boolean or 0/1 masks."""
    g = as_graph(graph, name)
    labels_np = None if labels is None else np.ascontiguousarray(_numpy(labels)).astype(np.int32)
    if num_classes is None:
        num_classes = 0 if labels_np is None else int(labels_np.max(initial=-1)) + 1

    def mask(m):
        return None if m is None else np.ascontiguousarray(_numpy(m)).astype(np.uint8)

    feats = None if features is None else np.ascontiguousarray(_numpy(features), dtype=np.float32)
    return Dataset.from_arrays(g, feats, labels_np, num_classes, mask(train_mask), mask(val_mask), mask(test_mask),
                               name, directed)


def train(data, model="gcn", **options):
    """Trains GCN (Kipf & Welling) or GIN (GNNAdvisor's setup) with Tessel's own training loop, as ``tessel-gnn
    train`` does: ``data`` is a :class:`Dataset` or a path. Under ``mpiexec -n W`` with W > 1 the training is
    distributed over the ranks (``distributed=False`` keeps it in each process). Options (defaults): hidden (16),
    layers (2), epochs (200), learning_rate (0.01), weight_decay (5e-4), dropout (0.5), patience (10: early stop;
    0: off), normalize_features, gin_eps, random_features, algorithm ("adaptive"), timing, features ("auto",
    "dense", "sparse"), seed (42), checkpoint, checkpoint_every, resume, dist_partition, dist_schedule, on_epoch (a
    callable given each epoch's record). Ctrl-C stops it between epochs with KeyboardInterrupt.

    Returns a dict: history (one dict per epoch), train/val/test accuracy, times and the aggregation plans."""
    if not isinstance(data, Dataset):
        data = load_dataset(data)
    result = _g.train(data, model, **options)
    result["plans"] = [json.loads(p) for p in result["plans"]]
    return result
