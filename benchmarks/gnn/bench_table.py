#!/usr/bin/python3
"""Summarizes tessel-gnn-bench JSON files: median ms per kernel and the adaptive speedups, as a Markdown table.
`bench_table.py --runs DIR...` combines several runs of run_bench.sh (medians over the runs).
Where peers-G.json files (benchmarks/gnn/peers/peers.py) lie next to bench-G.json, a second table sets adaptive
beside the best single kernel on either vertex order, the roofline and the peers; `--plot FILE.png` draws every
kernel's point per graph and width against the machine's bandwidth and compute ceilings; `--check` fails unless the
files hold the machine's limits and every width's roofline and no-reuse times. `bench_table.py --training DIR`
summarizes benchmarks/gnn/run_training.sh (Tessel's GCN training against PyTorch Geometric's)."""
import json
import math
import sys


def load(paths):
    """The bench files that hold results (a skipped device bench has none)."""
    out = []
    for p in paths:
        with open(p) as f:
            d = json.load(f)
        if "results" in d:
            d["_path"] = p
            out.append(d)
        else:
            print(f"{p}: {d.get('skipped', 'no results')}")
    return out


def main(paths):
    files = load(paths)
    if not files:
        return
    device = any(d.get("device") == "cuda" for d in files)
    rows = []
    for d in files:
        for r in d["results"]:
            rows.append((d["dataset"], d["nodes"], d["nnz"], r))
    # The named baseline: Kokkos Kernels on the host, cuSPARSE SpMM (CSR_ALG2) on the device.
    baseline, baseline_name = ("cusparse", "cuSPARSE SpMM") if device else ("kk", "Kokkos Kernels spmv")
    order = ["csr", "csr_feature_tiled", "coo", "coo_atomic", "tiles", "dense", "kk", "cusparse", "csr(reordered)",
             "adaptive"]
    kernels = [k for k in order if any(k in r["median_ms"] for _, _, _, r in rows)]
    print("| graph | nodes | nnz | F | " + " | ".join(kernels) +
          f" | best single | adaptive vs best | vs {baseline} |")
    print("|" + "---|" * (len(kernels) + 7))
    geo = {}
    for name, n, nnz, r in rows:
        ms = r["median_ms"]
        cells = [f"{ms[k]:.3f}" if k in ms else "-" for k in kernels]
        best = r.get("best_single", "-")
        s_best = r.get("speedup_vs_best_single", float("nan"))
        s_base = r.get("adaptive_speedup", {}).get(baseline, float("nan"))
        print(f"| {name} | {n} | {nnz} | {r['features']} | " + " | ".join(cells) +
              f" | {best} | {s_best:.2f}x | {s_base:.2f}x |")
        geo.setdefault(r["features"], []).append((s_best, s_base))
    print()
    for f in sorted(geo):
        v = [x for x in geo[f] if x[0] is not None and not math.isnan(x[0])]
        if not v:
            continue
        gb = math.exp(sum(math.log(a) for a, _ in v) / len(v))
        vb = [b for _, b in v if b is not None and not math.isnan(b)]
        gk = math.exp(sum(math.log(b) for b in vb) / len(vb)) if vb else float("nan")
        worst = min(a for a, _ in v)
        print(f"F = {f}: geometric mean speedup of adaptive over the best single kernel {gb:.2f}x "
              f"(worst graph {worst:.2f}x), over {baseline_name} {gk:.2f}x, {len(v)} graphs")




def calibrate(paths):
    """Effective rates (GFLOP/s per stored element) of the class kernels timed by the adaptive tuner: the data
    behind CostModel's defaults."""
    rates = {"csr": [], "tiles": [], "dense": []}
    for d in load(paths):
        # Classes timed below 20 us on the host (2 us on a GPU) are mostly call overhead.
        floor = 2e-6 if d.get("device") == "cuda" else 2e-5
        for r in d["results"]:
            plan, fw = r.get("plan"), r["features"]
            if not plan:
                continue
            for c in plan["classes"]:
                elements = {"csr": c["nnz"], "tiles": c["tiles"] * 128, "dense": c["dense_elements"]}
                for k, t in c["measured"].items():
                    if t and t > floor:
                        rates[k].append(2.0 * elements[k] * fw / t * 1e-9)
    for k, v in rates.items():
        if v:
            v.sort()
            print(f"{k}: median {v[len(v) // 2]:.1f} GFLOP/s per stored element over {len(v)} timed classes "
                  f"(range {v[0]:.1f} .. {v[-1]:.1f})")


def over_runs(dirs):
    """Several runs of run_bench.sh (one directory each): per graph and F, the median over the runs of adaptive's
    speedup over the best single kernel and over the baseline, with their range; timings on a shared machine
    move from run to run (memory placement, other processes) by more than the 5% that matters here."""
    import glob
    import os
    import statistics
    points = {}
    for d in dirs:
        for f in load(sorted(glob.glob(os.path.join(d, "bench-*.json")))):
            baseline = "cusparse" if f.get("device") == "cuda" else "kk"
            for r in f["results"]:
                key = (f["dataset"], r["features"])
                best = r.get("speedup_vs_best_single")
                base = r.get("adaptive_speedup", {}).get(baseline)
                if best is not None and base is not None:
                    points.setdefault(key, []).append((best, base))
    print(f"| graph | F | adaptive vs best single ({len(dirs)} runs: median [range]) | vs baseline (median) |")
    print("|---|---|---|---|")
    geo = {}
    for (name, fw), v in sorted(points.items()):
        best = [a for a, _ in v]
        base = statistics.median(b for _, b in v)
        med = statistics.median(best)
        print(f"| {name} | {fw} | {med:.2f}x [{min(best):.2f}-{max(best):.2f}] | {base:.2f}x |")
        geo.setdefault(fw, []).append((med, base))
    print()
    for fw in sorted(geo):
        v = geo[fw]
        gb = math.exp(sum(math.log(a) for a, _ in v) / len(v))
        gk = math.exp(sum(math.log(b) for _, b in v) / len(v))
        print(f"F = {fw}: geometric mean of the median speedups over the best single kernel {gb:.2f}x (worst graph "
              f"{min(a for a, _ in v):.2f}x), over the baseline {gk:.2f}x, {len(v)} graphs")


SINGLE = ["csr", "csr_feature_tiled", "coo", "tiles", "dense", "kk"]
PEERS = [("scipy", "scipy"), ("torch_sparse_mm", "torch.sparse.mm"), ("pyg_edge_index", "PyG edge_index"),
         ("pyg_sparse_adj", "PyG sparse adj")]


def geomean(v):
    return math.exp(sum(math.log(x) for x in v) / len(v)) if v else float("nan")


def peer_points(paths):
    """Per bench file and width: adaptive's time, roofline fraction and no-reuse time, the best single kernel on
    either vertex order (the single kernels on the graph's order, csr on the handle's reordered one), and the
    peers' times from the peers-G.json next to bench-G.json (None without one)."""
    import os
    out = []
    for d in load(paths):
        pp = os.path.join(os.path.dirname(d["_path"]), "peers-" + os.path.basename(d["_path"])[len("bench-"):])
        peers = {}
        if os.path.exists(pp):
            with open(pp) as f:
                for r in json.load(f)["results"]:
                    peers[r["features"]] = r["median_ms"]
        for r in d["results"]:
            ms = r["median_ms"]
            either = {k: ms[k] for k in SINGLE + ["csr(reordered)"] if k in ms}
            best = min(either, key=either.get)
            p = peers.get(r["features"])
            out.append({"graph": d["dataset"], "f": r["features"], "adaptive": ms["adaptive"],
                        "roofline": r.get("roofline_fraction", {}).get("adaptive", float("nan")),
                        "no_reuse": r.get("no_reuse_ms"), "best": best, "best_ms": either[best],
                        "vs_either": either[best] / ms["adaptive"], "vs_orig": r.get("speedup_vs_best_single"),
                        "peers": {k: p.get(k) for k, _ in PEERS} if p else None,
                        "vs_peer": min(v for v in p.values()) / ms["adaptive"] if p else None})
    return out


def peer_summary(points):
    geo = {}
    for q in points:
        g = geo.setdefault(q["f"], {"either": [], "roof": [], "peer": [], "orig": []})
        g["either"].append(q["vs_either"])
        g["roof"].append(q["roofline"])
        if q["vs_orig"]:
            g["orig"].append(q["vs_orig"])
        if q["vs_peer"]:
            g["peer"].append(q["vs_peer"])
    for f in sorted(geo):
        g = geo[f]
        print(f"F = {f}: adaptive vs the best single kernel on either order: worst {min(g['either']):.2f}x, geomean "
              f"{geomean(g['either']):.2f}x; vs the best single in the original order: geomean "
              f"{geomean(g['orig']):.2f}x; roofline fraction geomean {100 * geomean(g['roof']):.0f}% "
              f"(lowest {100 * min(g['roof']):.0f}%)" +
              (f"; vs the best peer: worst {min(g['peer']):.2f}x, geomean {geomean(g['peer']):.2f}x"
               if g["peer"] else ""))


def with_peers(paths):
    """Adaptive beside the best single kernel on either vertex order, the roofline and the peers (one run)."""
    points = peer_points(paths)
    if not any(q["peers"] for q in points):
        return
    print("| graph | F | adaptive ms | roofline | no-reuse ms | best single, either order | adaptive vs it | "
          + " | ".join(name for _, name in PEERS) + " | adaptive vs best peer |")
    print("|" + "---|" * (7 + len(PEERS) + 1))
    for q in points:
        cells = [f"{q['peers'][k]:.3f}" if q["peers"] and q["peers"].get(k) else "-" for k, _ in PEERS]
        no_reuse = f"{q['no_reuse']:.3f}" if q["no_reuse"] is not None else "-"
        vs_peer = f"{q['vs_peer']:.2f}x" if q["vs_peer"] else "-"
        print(f"| {q['graph']} | {q['f']} | {q['adaptive']:.3f} | {100 * q['roofline']:.0f}% | {no_reuse} | "
              f"{q['best']} {q['best_ms']:.3f} | {q['vs_either']:.2f}x | " + " | ".join(cells) + f" | {vs_peer} |")
    print()
    peer_summary(points)


def peers_over_runs(dirs):
    """with_peers over several runs: per graph and width the median of each figure, ratios with their range."""
    import glob
    import os
    import statistics
    by_key = {}
    for d in dirs:
        for q in peer_points(sorted(glob.glob(os.path.join(d, "bench-*.json")))):
            by_key.setdefault((q["graph"], q["f"]), []).append(q)
    if not any(q["peers"] for v in by_key.values() for q in v):
        return
    med = statistics.median
    print(f"| graph | F | adaptive ms | roofline | no-reuse ms | adaptive vs best single, either order "
          f"({len(dirs)} runs: median [range]) | " + " | ".join(name for _, name in PEERS) +
          " | adaptive vs best peer [range] |")
    print("|" + "---|" * (6 + len(PEERS) + 1))
    summary = []
    for (graph, f), v in sorted(by_key.items()):
        either = [q["vs_either"] for q in v]
        peer = [q["vs_peer"] for q in v if q["vs_peer"]]
        cells = []
        for k, _ in PEERS:
            t = [q["peers"][k] for q in v if q["peers"] and q["peers"].get(k)]
            cells.append(f"{med(t):.3f}" if t else "-")
        no_reuse = [q["no_reuse"] for q in v if q["no_reuse"] is not None]
        print(f"| {graph} | {f} | {med(q['adaptive'] for q in v):.3f} | {100 * med(q['roofline'] for q in v):.0f}% | "
              + (f"{med(no_reuse):.3f}" if no_reuse else "-") +
              f" | {med(either):.2f}x [{min(either):.2f}-{max(either):.2f}] | " + " | ".join(cells) +
              (f" | {med(peer):.2f}x [{min(peer):.2f}-{max(peer):.2f}] |" if peer else " | - |"))
        summary.append({"f": f, "vs_either": med(either), "roofline": med(q["roofline"] for q in v),
                        "vs_orig": med(q["vs_orig"] for q in v if q["vs_orig"]) if any(q["vs_orig"] for q in v)
                        else None, "vs_peer": med(peer) if peer else None})
    print()
    print("Medians over the runs per point, then:")
    peer_summary(summary)


def check(paths):
    """Exits non-zero unless every file has the machine's limits and every width its roofline and no-reuse times
    (the fields the tables and the plot read)."""
    files = load(paths)
    bad = []
    if not files:
        bad.append("no bench results")
    for d in files:
        m = d.get("machine", {})
        for k in ("triad_gbs", "fma_gflops"):
            if not m.get(k, 0) > 0:
                bad.append(f"{d['_path']}: machine.{k} = {m.get(k)}, expected > 0")
        for r in d["results"]:
            g = m.get("gather_gbs", {}).get(str(r["features"]), 0)
            if not g > 0:
                bad.append(f"{d['_path']}: machine.gather_gbs[{r['features']}] = {g}, expected > 0")
            for k in ("roofline_ms", "no_reuse_ms", "compulsory_bytes"):
                if not r.get(k, 0) > 0:
                    bad.append(f"{d['_path']}: F = {r['features']}: {k} = {r.get(k)}, expected > 0")
            if not 0 < r.get("roofline_fraction", {}).get("adaptive", 0) < 100:
                bad.append(f"{d['_path']}: F = {r['features']}: roofline_fraction.adaptive out of (0, 100)")
    if bad:
        sys.exit("bench_table.py --check: " + "; ".join(bad))


def plot(paths, out):
    """The roofline: GFLOP/s against arithmetic intensity (flops per compulsory byte), every kernel's point per
    graph and width, with the machine's triad bandwidth and FMA peak as ceilings."""
    import os
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    files = load(paths)
    if not files:
        return
    machine = files[0]["machine"]
    bw, peak = machine["triad_gbs"], machine["fma_gflops"]
    fig, ax = plt.subplots(figsize=(9, 6))
    markers = dict(zip(SINGLE + ["csr(reordered)", "adaptive"], "os^vDx+*"))
    colors = {16: "tab:blue", 64: "tab:orange", 256: "tab:green"}
    lo, hi = float("inf"), 0.0
    seen = set()
    for d in files:
        for r in d["results"]:
            if "compulsory_bytes" not in r:
                continue
            intensity = r["flops"] / r["compulsory_bytes"]
            lo, hi = min(lo, intensity), max(hi, intensity)
            for k, t in r["median_ms"].items():
                if k not in markers:
                    continue
                label = k if k not in seen else None
                seen.add(k)
                ax.scatter(intensity, r["flops"] / (t * 1e-3) * 1e-9, marker=markers[k], s=60 if k == "adaptive" else 25,
                           color=colors.get(r["features"], "gray"), label=label,
                           edgecolors="black" if k == "adaptive" else None, linewidths=0.5)
    if hi == 0:
        return
    xs = [lo / 2, hi * 2, peak / bw]
    xs = sorted(x for x in xs if lo / 2 <= x <= hi * 2) or [lo / 2, hi * 2]
    xs = [lo / 2] + xs + [hi * 2]
    ax.plot(xs, [min(peak, bw * x) for x in xs], color="black", lw=1.5,
            label=f"roofline: triad {bw:.1f} GB/s, FMA {peak:.0f} GFLOP/s ({machine['threads']} thread(s))")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (flops per compulsory byte: A, X and Y once)")
    ax.set_ylabel("GFLOP/s (2 nnz F per apply)")
    ax.set_title("Y = A X on the host, every graph; colour = F (blue 16, orange 64, green 256)")
    legend = ax.legend(fontsize=8, loc="lower right")
    for handle in getattr(legend, "legend_handles", None) or legend.legendHandles:  # markers in black, not F's colour
        if hasattr(handle, "set_facecolor") and handle.get_label() != "_":
            handle.set_facecolor("black")
            handle.set_edgecolor("black")
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    tmp = out + ".tmp.png"
    fig.savefig(tmp, dpi=120)
    os.replace(tmp, out)  # never a half-written plot in place of a good one
    print(f"roofline plot written to {out}")


def training(out):
    """run_training.sh's runs: per data set, Tessel's GCN and PyG's (with its default bias, and without: the same
    model as Tessel's), ms per epoch and test accuracy (medians over the runs, with the range)."""
    import glob
    import os
    import statistics
    points = {}
    for p in sorted(glob.glob(os.path.join(out, "tessel-*-run*.json"))):
        with open(p) as f:
            d = json.load(f)
        points.setdefault(d["dataset"], {}).setdefault("tessel", []).append(
            (d["ms_per_epoch"], 100 * d["test_accuracy"]))
    for p in sorted(glob.glob(os.path.join(out, "pyg-bias-*-run*.json"))):
        with open(p) as f:
            for r in json.load(f)["results"]:
                points.setdefault(r["dataset"], {}).setdefault("pyg_" + r["bias"], []).append(
                    (r["ms_per_epoch"], 100 * r["test_accuracy"]))

    def cell(v, i, fmt):
        x = [e[i] for e in v]
        return f"{fmt.format(statistics.median(x))} [{fmt.format(min(x))}-{fmt.format(max(x))}]" if x else "-"

    def median(v, i):
        return statistics.median(e[i] for e in v) if v else float("nan")

    print("| data set | Tessel ms/epoch | PyG ms/epoch | speedup | Tessel test acc % | PyG test acc % | "
          "PyG without bias: ms/epoch, test acc % | runs |")
    print("|---|---|---|---|---|---|---|---|")
    for name, v in sorted(points.items()):
        t, g, nb = v.get("tessel", []), v.get("pyg_on", []), v.get("pyg_off", [])
        print(f"| {name} | {cell(t, 0, '{:.2f}')} | {cell(g, 0, '{:.2f}')} | {median(g, 0) / median(t, 0):.1f}x | "
              f"{cell(t, 1, '{:.1f}')} | {cell(g, 1, '{:.1f}')} | {cell(nb, 0, '{:.2f}')}, {cell(nb, 1, '{:.1f}')} | "
              f"{len(t)} / {len(g)} / {len(nb)} |")


if __name__ == "__main__":
    argv = sys.argv[1:]
    if "--check" in argv:
        argv.remove("--check")
        check([a for i, a in enumerate(argv) if a != "--plot" and (i == 0 or argv[i - 1] != "--plot")])
    if argv and argv[0] == "--training":
        training(argv[1])
        sys.exit(0)
    plot_to = None
    if "--plot" in argv:
        i = argv.index("--plot")
        plot_to = argv[i + 1]
        del argv[i:i + 2]
    if argv and argv[0] == "--runs":
        over_runs(argv[1:])
        print()
        peers_over_runs(argv[1:])
    else:
        main(argv)
        print()
        with_peers(argv)
        print()
        calibrate(argv)
        if plot_to:
            plot(argv, plot_to)
