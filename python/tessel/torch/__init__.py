"""PyTorch operators and modules on Tessel.

Importing this package registers the operators ``torch.ops.tessel.spmm`` (graph aggregation, differentiable in
the features) and ``torch.ops.tessel.moe_forward`` / ``moe_backward`` (the MoE layer), each with a fake kernel, so
that ``torch.compile`` and autograd see real operators. Modules: :class:`tessel.torch.gnn.GCNConv`,
:class:`tessel.torch.gnn.GINConv` (drop-in replacements of PyTorch Geometric's layers) and
:class:`tessel.torch.moe.MoELayer`.
"""
from . import gnn, moe  # noqa: F401  (registers the operators)
