"""The MoE layer of ``tessel::moe`` (COMET) on NumPy or any DLPack arrays, and its dense reference.

Most users want :class:`tessel.torch.moe.MoELayer` (a ``torch.nn.Module``); this module is the framework-neutral
binding under it: :class:`MoeLayer` runs forward and backward over the MPI world (EP x TP ranks) on the caller's
weight arrays, which it reads in place at every forward.
"""
from . import _tessel

_m = _tessel.moe

MoeConfig = _m.MoeConfig
MoeLayer = _m.MoeLayer
reference_forward = _m.reference_forward
reference_backward = _m.reference_backward
make_weights = _m.make_weights
make_tokens = _m.make_tokens
make_gate = _m.make_gate
shard_weights = _m.shard_weights
SCHEDULES = ("sequential", "pipelined", "comet")

__all__ = ["MoeConfig", "MoeLayer", "reference_forward", "reference_backward", "make_weights", "make_tokens",
           "make_gate", "shard_weights", "SCHEDULES"]
