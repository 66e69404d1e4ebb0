"""Graph convolutions whose aggregation runs through Tessel's ``SpmmHandle``.

:class:`GCNConv` and :class:`GINConv` take the constructor arguments, parameters (names, shapes and
initialization, consuming the random generator as PyTorch Geometric does) and ``forward(x, edge_index,
edge_weight=None)`` of PyTorch Geometric's layers and compute the same function, so they replace those layers in
an unchanged model (``state_dict`` files load either way). The aggregation is the operator
``torch.ops.tessel.spmm(x, handle, transpose)``; its handle (the normalized adjacency, preprocessed and tuned once)
is cached per graph: the same ``edge_index`` tensor (same storage and version) reuses it.
"""
import collections
import itertools
import math
import threading

import numpy as np
import torch

from .. import gnn as _gnn

__all__ = ["GCNConv", "GINConv", "spmm", "register_handle", "unregister_handle", "gcn_norm_csr"]

_lock = threading.Lock()
_handles = {}
_ids = itertools.count(1)


def register_handle(handle):
    """Makes a :class:`tessel.gnn.SpmmHandle` usable by ``torch.ops.tessel.spmm``; returns its id."""
    with _lock:
        i = next(_ids)
        _handles[i] = handle
    return i


def unregister_handle(handle_id):
    with _lock:
        _handles.pop(handle_id, None)


def _handle(handle_id):
    h = _handles.get(handle_id)
    if h is None:
        raise KeyError(f"tessel.spmm: no handle {handle_id} is registered (register_handle, or it was dropped)")
    return h


@torch.library.custom_op("tessel::spmm", mutates_args=())
def spmm(x: torch.Tensor, handle: int, transpose: bool = False) -> torch.Tensor:
    """``A @ x`` (``A^T @ x`` with ``transpose``) for the adjacency of a registered handle; ``x``: (n, F) float32
    on the CPU (any strides: a non-contiguous ``x`` is copied first, as PyTorch's own operators do)."""
    h = _handle(handle)
    if x.dtype != torch.float32:
        raise TypeError(f"tessel.spmm: x must be float32, got {x.dtype} (Tessel aggregates float32 features)")
    rows = h.shape[1] if transpose else h.shape[0]
    out = torch.empty((rows, x.shape[1]), dtype=x.dtype, device=x.device)
    h._h.apply(x.contiguous(), out, transpose, False)
    return out


@spmm.register_fake
def _spmm_fake(x, handle, transpose=False):
    h = _handle(handle)
    if x.dtype != torch.float32:
        raise TypeError(f"tessel.spmm: x must be float32, got {x.dtype}")
    return x.new_empty((h.shape[1] if transpose else h.shape[0], x.shape[1]))


def _spmm_setup(ctx, inputs, output):
    ctx.handle, ctx.transpose = inputs[1], inputs[2]


def _spmm_backward(ctx, grad):
    return spmm(grad, ctx.handle, not ctx.transpose), None, None


spmm.register_autograd(_spmm_backward, setup_context=_spmm_setup)


# --- the adjacency of a layer, cached per graph --------------------------------------------------------------------

_CACHE_SIZE = 16
_cache = collections.OrderedDict()


def gcn_norm_csr(edge_index, edge_weight, num_nodes, improved=False, add_self_loops=True, normalize=True):
    """CSR arrays of PyTorch Geometric's ``gcn_norm`` (source-to-target flow): self-loops added where a node has
    none (a given self-loop keeps its weight; the fill value 2 of ``improved`` applies when weights are given, as in
    PyG), D^-1/2 A D^-1/2 with D the in-degree (float32), row ``i`` holding the edges into ``i``."""
    ei = edge_index.detach().cpu().numpy().astype(np.int64, copy=False)
    w = None if edge_weight is None else edge_weight.detach().cpu().numpy().astype(np.float32)
    n = num_nodes
    if add_self_loops:
        keep = ei[0] != ei[1]
        if w is not None:
            loop_w = np.full(n, 2.0 if improved else 1.0, np.float32)
            loop_w[ei[0][~keep]] = w[~keep]
            w = np.concatenate([w[keep], loop_w])
        loops = np.arange(n, dtype=np.int64)
        ei = np.concatenate([ei[:, keep], np.stack([loops, loops])], axis=1)
    if w is None:
        w = np.ones(ei.shape[1], np.float32)
    if normalize:
        deg = np.zeros(n, np.float32)
        np.add.at(deg, ei[1], w)
        with np.errstate(divide="ignore"):
            dis = np.power(deg, np.float32(-0.5))
        dis[np.isinf(dis)] = 0
        w = dis[ei[0]] * w * dis[ei[1]]
    return _gnn.edge_index_to_csr(ei, n, w)


def _graph_key(edge_index, edge_weight, num_nodes, kind, options):
    def ident(t):
        return None if t is None else (t.data_ptr(), t._version, tuple(t.shape), str(t.dtype))

    return (ident(edge_index), ident(edge_weight), num_nodes, kind, options)


@torch.compiler.disable
def _handle_for(edge_index, edge_weight, num_nodes, kind, options, spmm_options):
    """The registered handle id of a layer's adjacency (built, preprocessed and tuned on first sight)."""
    if not isinstance(edge_index, torch.Tensor):
        raise TypeError(f"edge_index must be a torch.Tensor (2 x E, or a sparse adjacency), got {type(edge_index)}")
    if edge_weight is not None and edge_weight.requires_grad:
        raise NotImplementedError("tessel: gradients with respect to edge_weight are not supported (the "
                                  "aggregation is differentiable in the features only); pass edge_weight.detach()")
    key = _graph_key(edge_index, edge_weight, num_nodes, kind, options)
    with _lock:
        hit = _cache.get(key)
        if hit is not None:
            _cache.move_to_end(key)
            return hit[0]
    if edge_index.layout != torch.strided:
        # A sparse adjacency (PyG's adj_t convention: row i aggregates from its columns).
        t = edge_index.detach().cpu()
        if t.layout == torch.sparse_coo:
            t = t.coalesce()
            idx = t.indices()
            ei = torch.stack([idx[1], idx[0]])
            weight = t.values()
        else:
            csr = t.to_sparse_csr()
            rows = torch.repeat_interleave(torch.arange(csr.shape[0]), csr.crow_indices().diff())
            ei = torch.stack([csr.col_indices(), rows])
            weight = csr.values()
        if edge_weight is None and not torch.all(weight == 1):
            edge_weight = weight
    else:
        ei = edge_index
    if kind == "gcn":
        improved, add_self_loops, normalize = options
        indptr, indices, values, n = gcn_norm_csr(ei, edge_weight, num_nodes, improved, add_self_loops, normalize)
    else:
        indptr, indices, values, n = _gnn.edge_index_to_csr(ei, num_nodes, edge_weight)
    graph = _gnn.Graph.from_csr(indptr, indices, values, n, f"{kind} layer graph")
    handle = _gnn.SpmmHandle(graph, **spmm_options)
    hid = register_handle(handle)
    with _lock:
        # The tensors stay referenced, so their storage (and so the key) cannot be reused by another graph.
        _cache[key] = (hid, edge_index, edge_weight)
        while len(_cache) > _CACHE_SIZE:
            _, (old, _, _) = _cache.popitem(last=False)
            unregister_handle(old)
    return hid


def clear_cache():
    """Drops every cached adjacency (their handles are released)."""
    with _lock:
        for hid, _, _ in _cache.values():
            _handles.pop(hid, None)
        _cache.clear()


def _glorot(t):
    # torch_geometric.nn.inits.glorot
    a = math.sqrt(6.0 / (t.size(-2) + t.size(-1)))
    with torch.no_grad():
        t.uniform_(-a, a)


def _reset(module):
    # torch_geometric.nn.inits.reset
    if hasattr(module, "reset_parameters"):
        module.reset_parameters()
    else:
        for child in module.children() if hasattr(module, "children") else []:
            _reset(child)


class _Linear(torch.nn.Module):
    """PyG's ``Linear(in, out, bias=False, weight_initializer='glorot')``: one weight (out, in)."""

    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.in_channels, self.out_channels = in_channels, out_channels
        self.weight = torch.nn.Parameter(torch.empty(out_channels, in_channels))
        self.reset_parameters()

    def reset_parameters(self):
        _glorot(self.weight)

    def forward(self, x):
        return torch.nn.functional.linear(x, self.weight)

    def extra_repr(self):
        return f"{self.in_channels}, {self.out_channels}, bias=False"


class GCNConv(torch.nn.Module):
    """Kipf and Welling's graph convolution as PyTorch Geometric's ``GCNConv``: ``D^-1/2 (A + I) D^-1/2 (X W^T) +
    b``, with the same arguments and parameters (``lin.weight``, ``bias``). Tessel's own options:

    * ``algorithm``: the aggregation algorithm (``adaptive`` by default; any of :func:`tessel.gnn.algorithms`);
    * ``timing``: adaptive selection by timing (True) or by the cost model (False: deterministic plans).

    Features must be float32 (Tessel aggregates in float32); ``cached`` is accepted for compatibility (adjacencies
    are always cached per graph tensor).
    """

    def __init__(self, in_channels, out_channels, improved=False, cached=False, add_self_loops=None, normalize=True,
                 bias=True, *, algorithm="adaptive", timing=True, **kwargs):
        super().__init__()
        if add_self_loops is None:
            add_self_loops = normalize
        if add_self_loops and not normalize:
            raise ValueError("'GCNConv' does not support adding self-loops to the graph when no on-the-fly "
                             "normalization is applied")
        if in_channels <= 0:
            raise ValueError("tessel GCNConv needs in_channels > 0 (lazy initialization is not supported)")
        unknown = set(kwargs) - {"aggr", "flow", "node_dim"}
        if unknown or kwargs.get("aggr", "add") != "add" or kwargs.get("flow", "source_to_target") != \
                "source_to_target":
            raise ValueError(f"tessel GCNConv: unsupported arguments {sorted(kwargs)} (sum aggregation, "
                             "source_to_target flow only)")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.improved, self.cached = improved, cached
        self.add_self_loops, self.normalize = add_self_loops, normalize
        self.spmm_options = {"algorithm": algorithm, "timing": timing}
        self.lin = _Linear(in_channels, out_channels)
        if bias:
            self.bias = torch.nn.Parameter(torch.empty(out_channels))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        self.lin.reset_parameters()
        if self.bias is not None:
            with torch.no_grad():
                self.bias.zero_()

    def forward(self, x, edge_index, edge_weight=None):
        if isinstance(x, (tuple, list)):
            raise ValueError("'GCNConv' received a tuple of node features as input while this layer does not "
                             "support bipartite message passing")
        hid = _handle_for(edge_index, edge_weight, x.size(0), "gcn",
                          (self.improved, self.add_self_loops, self.normalize), self.spmm_options)
        out = spmm(self.lin(x), hid, False)
        if self.bias is not None:
            out = out + self.bias
        return out

    def extra_repr(self):
        return f"{self.in_channels}, {self.out_channels}, algorithm={self.spmm_options['algorithm']}"


class GINConv(torch.nn.Module):
    """The graph isomorphism operator as PyTorch Geometric's ``GINConv``: ``nn((1 + eps) x_i + sum_j x_j)``, the
    sum over the edges j -> i of ``edge_index`` (duplicates counted). Same arguments (``nn``, ``eps``,
    ``train_eps``) and parameters; the aggregation runs through Tessel (``algorithm``, ``timing`` as in
    :class:`GCNConv`)."""

    def __init__(self, nn, eps=0.0, train_eps=False, *, algorithm="adaptive", timing=True, **kwargs):
        super().__init__()
        if set(kwargs) - {"aggr", "flow", "node_dim"} or kwargs.get("aggr", "add") != "add":
            raise ValueError(f"tessel GINConv: unsupported arguments {sorted(kwargs)}")
        self.nn = nn
        self.initial_eps = eps
        if train_eps:
            self.eps = torch.nn.Parameter(torch.empty(1))
        else:
            self.register_buffer("eps", torch.empty(1))
        self.spmm_options = {"algorithm": algorithm, "timing": timing}
        self.reset_parameters()

    def reset_parameters(self):
        _reset(self.nn)
        with torch.no_grad():
            self.eps.fill_(self.initial_eps)

    def forward(self, x, edge_index, size=None):
        if isinstance(x, (tuple, list)):
            raise ValueError("tessel GINConv: bipartite inputs are not supported")
        hid = _handle_for(edge_index, None, x.size(0), "gin", (), self.spmm_options)
        out = spmm(x, hid, False) + (1 + self.eps) * x
        return self.nn(out)

    def extra_repr(self):
        return f"nn={self.nn}"
