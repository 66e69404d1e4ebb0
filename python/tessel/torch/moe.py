"""An expert-parallel MoE layer as a ``torch.nn.Module``: routing, dispatch, expert FFNs and combine by Tessel's
``MoeLayer`` (schedules ``sequential``, ``pipelined``, ``comet``) over the MPI world, e.g. under
``mpiexec -n W python train.py``.

The expert shards (``w0``, ``w1``: this rank's E/EP experts, each K/TP wide) and the replicated gate (``gate_weight``,
``gate_bias``) are ``torch.nn.Parameter``\\ s whose memory Tessel reads in place at every forward; gradients are
written by Tessel straight into the tensors autograd hands to the optimizer, so a step copies no parameter. The
forward returns ``(out, aux_loss)``: ``aux_loss`` is the load-balancing loss over all ranks (the same value on
every rank) and is differentiable; the layer's backward takes its gradient once per job (give every rank the same
coefficient).
"""
import itertools
import threading
from typing import Optional

import torch

from .. import moe as _moe
from .. import world as _world

__all__ = ["MoELayer", "moe_forward", "moe_backward"]

_lock = threading.Lock()
_layers = {}
_ids = itertools.count(1)


class _Entry:
    """A core layer and the forward it last ran (its backward differentiates that one only)."""

    def __init__(self, core, config, pointers):
        self.core, self.config, self.pointers = core, config, pointers
        self.forward_id = 0
        self.has_bias = False
        self.inputs = ()


def _entry(layer_id):
    e = _layers.get(layer_id)
    if e is None:
        raise KeyError(f"tessel.moe: no layer {layer_id} (it was released)")
    return e


@torch.library.custom_op("tessel::moe_forward", mutates_args=())
def moe_forward(tokens: torch.Tensor, gate_weight: torch.Tensor, gate_bias: Optional[torch.Tensor], w0: torch.Tensor,
                w1: torch.Tensor, layer: int, schedule: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The layer's output [M, N], the load-balancing loss (scalar) and the id of this forward (int64 scalar)."""
    e = _entry(layer)
    out = torch.empty_like(tokens)
    inputs = (tokens.detach().contiguous(), gate_weight.detach(), None if gate_bias is None else gate_bias.detach())
    aux = e.core.forward(*inputs, out, schedule)
    # The C++ layer's backward reads the tokens and gate of its forward in place: they stay alive until the next
    # forward (a temporary, such as embedding[ids] or a contiguous copy, would otherwise be freed and reused).
    e.inputs = inputs
    e.forward_id += 1
    e.has_bias = gate_bias is not None
    return out, torch.tensor(aux, dtype=torch.float32), torch.tensor(e.forward_id, dtype=torch.int64)


@moe_forward.register_fake
def _moe_forward_fake(tokens, gate_weight, gate_bias, w0, w1, layer, schedule):
    return torch.empty_like(tokens), tokens.new_empty(()), tokens.new_empty((), dtype=torch.int64)


@torch.library.custom_op("tessel::moe_backward", mutates_args=())
def moe_backward(d_out: torch.Tensor, d_aux: torch.Tensor, forward_id: torch.Tensor, layer: int,
                 schedule: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients (tokens, gate weight, gate bias, w0, w1) of the layer's last forward."""
    e = _entry(layer)
    if int(forward_id) != e.forward_id:
        raise RuntimeError("tessel MoELayer: backward of an earlier forward; the layer keeps the state of its last "
                           "forward only (run the backward of each forward before the next forward)")
    c = e.config
    d_tokens = torch.empty((c.tokens, c.hidden), dtype=torch.float32)
    d_w0 = torch.empty((c.experts_per_group, c.hidden, c.gemm0_cols), dtype=torch.float32)
    d_w1 = torch.empty((c.experts_per_group, c.ffn_per_rank, c.hidden), dtype=torch.float32)
    d_gate_w = torch.zeros((c.hidden, c.experts), dtype=torch.float32)
    d_gate_b = torch.zeros((c.experts if e.has_bias else 0,), dtype=torch.float32)
    e.core.backward(d_out.contiguous(), d_tokens, d_w0, d_w1, d_gate_w, d_gate_b if e.has_bias else None, schedule,
                    float(d_aux))
    return d_tokens, d_gate_w, d_gate_b, d_w0, d_w1


@moe_backward.register_fake
def _moe_backward_fake(d_out, d_aux, forward_id, layer, schedule):
    c = _entry(layer).config
    return (d_out.new_empty((c.tokens, c.hidden)), d_out.new_empty((c.hidden, c.experts)),
            d_out.new_empty((c.experts if _entry(layer).has_bias else 0,)),
            d_out.new_empty((c.experts_per_group, c.hidden, c.gemm0_cols)),
            d_out.new_empty((c.experts_per_group, c.ffn_per_rank, c.hidden)))


def _setup(ctx, inputs, output):
    ctx.layer, ctx.schedule = inputs[5], inputs[6]
    ctx.has_bias = inputs[2] is not None
    # The tokens and gate are saved so that autograd refuses a backward after they were changed in place (the
    # layer's backward uses them as they were in the forward).
    ctx.save_for_backward(output[2], *(t for t in inputs[:3] if t is not None))


def _backward(ctx, d_out, d_aux, d_id):
    forward_id = ctx.saved_tensors[0]
    if d_out is None:
        d_out = torch.zeros((_entry(ctx.layer).config.tokens, _entry(ctx.layer).config.hidden))
    if d_aux is None:
        d_aux = torch.zeros(())
    d_tokens, d_gw, d_gb, d_w0, d_w1 = moe_backward(d_out, d_aux, forward_id, ctx.layer, ctx.schedule)
    return d_tokens, d_gw, d_gb if ctx.has_bias else None, d_w0, d_w1, None, None


moe_forward.register_autograd(_backward, setup_context=_setup)


class MoELayer(torch.nn.Module):
    """One MoE layer of ``experts`` experts (top-``topk`` gating, ``ffn``-wide SiLU-gated FFNs by default) over the
    MPI world: EP x TP = the number of ranks (``ep`` defaults to ranks / ``tp``). Every rank passes its own tokens
    ``[M, hidden]`` (or ``[..., hidden]``); ``forward`` returns ``(out, aux_loss)``. Construction and every forward
    and backward are collective (all ranks, same shapes and options: a mismatch is an error on every rank).

    Parameters: ``w0`` [E/EP, hidden, (2 if gated else 1) * ffn/TP] (gated: the gate and up halves of this rank's
    K-slice side by side), ``w1`` [E/EP, ffn/TP, hidden], ``gate_weight`` [hidden, experts], ``gate_bias``
    [experts] (replicated on every rank). They start from ``seed`` (the same model at every rank count: the dense
    experts of :func:`tessel.moe.make_weights`, sharded) unless :meth:`load_dense` sets them.

    ``schedule``: ``comet`` (tile-level overlap), ``pipelined`` or ``sequential``; ``tune_on_first_use``: let the
    first comet forward tune its parameters (see moe/README.md; off: the registry or its fallback rule).
    """

    def __init__(self, hidden, ffn, experts, topk, *, ep=None, tp=1, activation="silu", gated=True,
                 normalize_topk=True, gate_bias=True, schedule="comet", seed=1, pipeline_chunks=4,
                 pipeline_comm_workers=0, check_finite=True, tune_on_first_use=False, tuning_cache=""):
        super().__init__()
        rank, size = _world()
        if ep is None:
            ep = max(1, size // tp)
        self.rank, self.world_size = rank, size
        self.config = _moe.MoeConfig(0, hidden, ffn, experts, topk, ep, tp, activation, gated, normalize_topk)
        self.config.validate(size)
        if schedule not in _moe.SCHEDULES:
            raise ValueError(f"schedule must be one of {_moe.SCHEDULES}, got {schedule!r}")
        self.schedule = schedule
        self._options = (pipeline_chunks, pipeline_comm_workers, check_finite, tune_on_first_use, tuning_cache)
        c = self.config
        self.w0 = torch.nn.Parameter(torch.empty(c.experts_per_group, hidden, c.gemm0_cols))
        self.w1 = torch.nn.Parameter(torch.empty(c.experts_per_group, c.ffn_per_rank, hidden))
        self.gate_weight = torch.nn.Parameter(torch.empty(hidden, experts))
        if gate_bias:
            self.gate_bias = torch.nn.Parameter(torch.zeros(experts))
        else:
            self.register_parameter("gate_bias", None)
        self._ids = {}
        self.reset_parameters(seed)

    def reset_parameters(self, seed=1):
        """Dense experts from ``make_weights(config, seed)`` sharded to this rank; gate N(0, 1/hidden) from a
        generator seeded with ``seed`` (the same on every rank); bias zero."""
        w0, w1 = _moe.make_weights(self.config, seed)
        self.load_dense(w0, w1)
        g = torch.Generator().manual_seed(int(seed))
        with torch.no_grad():
            self.gate_weight.copy_(torch.randn(self.gate_weight.shape, generator=g) / self.config.hidden ** 0.5)
            if self.gate_bias is not None:
                self.gate_bias.zero_()

    @torch.no_grad()
    def load_dense(self, w0, w1):
        """Sets this rank's shards from the full weights of all experts: ``w0`` [E, hidden, (2 if gated else 1)
        ffn] (gated: [gate | up]), ``w1`` [E, ffn, hidden] (NumPy or tensors, float32)."""
        def np32(t):
            return t.detach().cpu().float().contiguous().numpy() if isinstance(t, torch.Tensor) else t

        s0, s1 = _moe.shard_weights(self.config, self.rank, np32(w0), np32(w1))
        self.w0.copy_(torch.from_numpy(s0))
        self.w1.copy_(torch.from_numpy(s1))

    def _layer(self, tokens):
        if self.w0.dtype != torch.float32 or tokens.dtype != torch.float32:
            raise TypeError(f"tessel MoELayer runs in float32, got tokens {tokens.dtype} and weights {self.w0.dtype}")
        if tokens.device.type != "cpu" or self.w0.device.type != "cpu":
            raise TypeError(f"tessel MoELayer: tokens and parameters must be on the CPU, got {tokens.device} and "
                            f"{self.w0.device}" + ("" if _moe._tessel.has_cuda else
                                                   " (this Tessel was built without its CUDA layer)"))
        m = tokens.shape[0]
        pointers = (self.w0.data_ptr(), self.w1.data_ptr())
        lid = self._ids.get(m)
        if lid is not None and _layers[lid].pointers != pointers:
            # The parameters were given new storage (param.data = ...): the layer is rebuilt on it.
            with _lock:
                _layers.pop(lid)
            lid = None
        if lid is None:
            config = _moe.MoeConfig(m, self.config.hidden, self.config.ffn, self.config.experts, self.config.topk,
                                    self.config.ep, self.config.tp, self.config.activation, self.config.gated,
                                    self.config.normalize_topk)
            if not (self.w0.is_contiguous() and self.w1.is_contiguous()):
                raise ValueError("tessel MoELayer: w0 and w1 must be contiguous")
            core = _moe.MoeLayer(config, self.w0.detach(), self.w1.detach(), *self._options)
            with _lock:
                lid = next(_ids)
                _layers[lid] = _Entry(core, config, pointers)
            self._ids[m] = lid
        return lid

    def forward(self, tokens):
        shape = tokens.shape
        if shape[-1] != self.config.hidden:
            raise ValueError(f"tessel MoELayer: tokens must be [..., {self.config.hidden}], got {tuple(shape)}")
        x = tokens.reshape(-1, shape[-1])
        lid = self._layer(x)
        out, aux, _ = moe_forward(x, self.gate_weight, self.gate_bias, self.w0, self.w1, lid, self.schedule)
        return out.reshape(shape), aux

    def last_stats(self, tokens_per_rank, backward=False):
        """Where the last forward (or backward) of M tokens per rank spent its time (seconds, this rank)."""
        return _layers[self._ids[tokens_per_rank]].core.stats(backward)

    def chosen_experts(self, tokens_per_rank):
        """[M, topk] experts the last forward of M tokens per rank chose."""
        return _layers[self._ids[tokens_per_rank]].core.chosen_experts()

    def __del__(self):
        for lid in getattr(self, "_ids", {}).values():
            _layers.pop(lid, None)

    def extra_repr(self):
        c = self.config
        return (f"hidden={c.hidden}, ffn={c.ffn}, experts={c.experts}, topk={c.topk}, ep={c.ep}, tp={c.tp}, "
                f"schedule={self.schedule}")
