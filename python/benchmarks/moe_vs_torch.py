"""tessel.torch.moe.MoELayer against a plain PyTorch expert-parallel MoE layer, in the same processes, interleaved.

  mpiexec -n 2 python moe_vs_torch.py [--models mixtral,qwen2,phi35] [--tokens 1024] [--scale 8] [--iters 5]
                                      [--warmup 2] [--schedules sequential,pipelined,comet] --json OUT.json

Shapes as tessel-moe-bench's (COMET's Table 2 with N and K divided by --scale, E and topk unchanged, EP = the
number of ranks, M tokens per rank). The PyTorch layer is written the way PyTorch users write one: a gate
(`x @ W + b`, softmax, top-k, renormalized), the token copies sorted by expert, the per-expert counts and then the
rows exchanged with `torch.distributed.nn.functional.all_to_all_single` (uneven splits, autograd through it) on the
gloo backend, a loop over the local experts (SiLU-gated FFN: `silu(x W_gate) * (x W_up) W_down`, two GEMMs), the
rows sent back the same way and combined with `index_add_`; the aux loss is the same E * sum f_e P_e over all ranks
(P through an autograd all_reduce). Both layers hold the same parameters (the PyTorch one starts from copies of the
Tessel layer's shards), and their outputs are compared before timing.

Timed: the forward (under torch.no_grad) and the training step (forward, loss = mean(out^2) + 0.01 aux, backward;
no optimizer step), each of --iters rounds running every variant once in a rotated order, after a barrier; a run
lasts until the slowest rank returns (max over the ranks); the median over the rounds is reported. One thread per
rank (OMP_NUM_THREADS=1, torch.set_num_threads(1)).
"""
import argparse
import json
import os
import time
import warnings


def parse():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="mixtral,qwen2,phi35")
    p.add_argument("--tokens", default="1024")
    p.add_argument("--scale", type=float, default=8)
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--schedules", default="sequential,pipelined,comet")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--port", type=int, default=29517)
    p.add_argument("--json", required=True)
    return p.parse_args()


args = parse()
warnings.filterwarnings("ignore", category=FutureWarning)  # torch.distributed.nn.functional's deprecation
os.environ["OMP_NUM_THREADS"] = "1"

import numpy as np  # noqa: E402
import torch  # noqa: E402  (before tessel: see python/README.md, Limits)
import torch.distributed as dist  # noqa: E402
import torch.distributed.nn.functional as dist_fn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import tessel  # noqa: E402
from tessel.torch.moe import MoELayer  # noqa: E402

torch.set_num_threads(1)
rank, world = tessel.world()
os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", str(args.port))
dist.init_process_group("gloo", rank=rank, world_size=world)

# COMET's Table 2 (moe/src/Synthetic.cpp): hidden N, ffn K, experts E, topk, gated
MODELS = {"mixtral": (4096, 14336, 8, 2, True), "qwen2": (2048, 1408, 64, 4, False), "phi35": (4096, 6400, 16, 2, True)}


def scaled(name):
    n, k, e, topk, gated = MODELS[name]
    n = max(8, round(n / args.scale))
    k = max(8, (round(k / args.scale) + 7) // 8 * 8)
    return n, k, e, topk, gated


class TorchMoE(torch.nn.Module):
    """Expert-parallel MoE over torch.distributed: this rank holds experts [rank * E/EP, (rank + 1) * E/EP)."""

    def __init__(self, hidden, ffn, experts, topk, gated, w0, w1, gate_weight, gate_bias):
        super().__init__()
        self.hidden, self.ffn, self.experts, self.topk, self.gated = hidden, ffn, experts, topk, gated
        self.world = dist.get_world_size()
        self.local = experts // self.world
        self.w0 = torch.nn.Parameter(w0.detach().clone())  # [E/EP, N, (2 if gated else 1) K]: [gate | up]
        self.w1 = torch.nn.Parameter(w1.detach().clone())  # [E/EP, K, N]
        self.gate_weight = torch.nn.Parameter(gate_weight.detach().clone())
        self.gate_bias = torch.nn.Parameter(gate_bias.detach().clone())

    def expert(self, e, x):
        h = x @ self.w0[e]
        if self.gated:
            h = F.silu(h[:, :self.ffn]) * h[:, self.ffn:]
        else:
            h = F.silu(h)
        return h @ self.w1[e]

    def forward(self, x):
        m = x.shape[0]
        probs = torch.softmax(x @ self.gate_weight + self.gate_bias, dim=-1)
        top_p, top_e = probs.topk(self.topk, dim=-1)
        top_p = top_p / top_p.sum(dim=-1, keepdim=True)
        flat_e = top_e.reshape(-1)
        order = torch.argsort(flat_e, stable=True)
        token = order // self.topk
        counts = torch.bincount(flat_e, minlength=self.experts)
        # aux loss: E * sum_e f_e P_e over all ranks
        stats = torch.cat([counts.to(probs.dtype), torch.tensor([float(m)])])
        dist.all_reduce(stats)
        p_sum = dist_fn.all_reduce(probs.sum(dim=0))
        aux = self.experts * torch.sum(stats[:-1] / (stats[-1] * self.topk) * p_sum / stats[-1])
        # dispatch: per-expert counts first, then the rows
        recv_counts = torch.empty_like(counts)
        dist.all_to_all_single(recv_counts, counts)
        send_splits = counts.view(self.world, self.local).sum(dim=1).tolist()
        recv_by_src = recv_counts.view(self.world, self.local)
        recv_splits = recv_by_src.sum(dim=1).tolist()
        rows = dist_fn.all_to_all_single(x.new_empty((sum(recv_splits), self.hidden)), x[token],
                                         output_split_sizes=recv_splits, input_split_sizes=send_splits)
        # received rows come per source rank, then per local expert: regroup them by expert
        seg = recv_by_src.reshape(-1)
        seg_start = torch.cumsum(seg, 0) - seg
        by_expert = torch.cat([torch.arange(int(seg_start[s * self.local + e]), int(seg_start[s * self.local + e] +
                                                                                   seg[s * self.local + e]))
                               for e in range(self.local) for s in range(self.world)]).long()
        grouped = rows[by_expert]
        per_expert = recv_by_src.sum(dim=0).tolist()
        out_rows = torch.cat([self.expert(e, part) for e, part in enumerate(torch.split(grouped, per_expert))])
        back = torch.empty_like(out_rows).index_copy(0, by_expert, out_rows) if len(by_expert) else out_rows
        y = dist_fn.all_to_all_single(x.new_empty((len(token), self.hidden)), back, output_split_sizes=send_splits,
                                      input_split_sizes=recv_splits)
        y = y * top_p.reshape(-1)[order].unsqueeze(1)
        return torch.zeros_like(x).index_add(0, token, y), aux


def slowest(seconds):
    t = torch.tensor([seconds], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t)


def timed(fn):
    dist.barrier()
    t0 = time.perf_counter()
    fn()
    return slowest(time.perf_counter() - t0)


def forward_only(layer, x):
    def run():
        with torch.no_grad():
            layer(x)
    return run


def train_step(layer, x):
    def run():
        layer.zero_grad(set_to_none=True)
        out, aux = layer(x)
        (out.square().mean() + 0.01 * aux).backward()
    return run


results = []
for name in args.models.split(","):
    n, k, e, topk, gated = scaled(name)
    for m in [int(t) for t in args.tokens.split(",")]:
        g = torch.Generator().manual_seed(args.seed * 1000 + rank)
        x = torch.randn((m, n), generator=g)
        tessel_layers = {s: MoELayer(n, k, e, topk, gated=gated, schedule=s, seed=args.seed)
                         for s in args.schedules.split(",")}
        ref = next(iter(tessel_layers.values()))
        with torch.no_grad():  # a skewed gate, as the bench's Zipf bias: not every expert equally loaded
            ref.gate_bias.copy_(torch.linspace(0.5, -0.5, e))
            for layer in tessel_layers.values():
                layer.gate_weight.copy_(ref.gate_weight)
                layer.gate_bias.copy_(ref.gate_bias)
        plain = TorchMoE(n, k, e, topk, gated, ref.w0, ref.w1, ref.gate_weight, ref.gate_bias)
        with torch.no_grad():
            want, want_aux = ref(x)
            got, got_aux = plain(x)
        err = float((got - want).abs().max() / want.abs().max())
        if err > 1e-4 or abs(float(got_aux) - float(want_aux)) > 1e-4 * abs(float(want_aux)):
            raise SystemExit(f"{name} M={m}: the PyTorch layer differs from Tessel's (max relative {err:.2e}, "
                             f"aux {float(got_aux)} vs {float(want_aux)})")
        variants = [("torch", plain)] + [(f"tessel-{s}", layer) for s, layer in tessel_layers.items()]
        for kind, make in (("forward", forward_only), ("train", train_step)):
            runs = {v: make(layer, x) for v, layer in variants}
            for _ in range(args.warmup):
                for v in runs:
                    timed(runs[v])
            times = {v: [] for v in runs}
            names = list(runs)
            for i in range(args.iters):
                for v in names[i % len(names):] + names[:i % len(names)]:
                    times[v].append(timed(runs[v]))
            row = {"model": name, "tokens": m, "N": n, "K": k, "E": e, "topk": topk, "ranks": world, "kind": kind,
                   "max_rel_diff": err, "median_ms": {v: 1e3 * float(np.median(t)) for v, t in times.items()},
                   "samples_ms": {v: [1e3 * s for s in t] for v, t in times.items()}}
            results.append(row)
            if rank == 0:
                med = row["median_ms"]
                print(f"{name} M={m} {kind}: " + ", ".join(f"{v} {t:.1f} ms" for v, t in med.items()) +
                      f" (torch / tessel-comet {med['torch'] / med.get('tessel-comet', float('nan')):.2f}x)",
                      flush=True)
        del tessel_layers, ref, plain

if rank == 0:
    with open(args.json, "w") as f:
        json.dump({"torch": torch.__version__, "results": results}, f, indent=1)
dist.destroy_process_group()
