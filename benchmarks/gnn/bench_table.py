#!/usr/bin/python3
"""Summarizes tessel-gnn-bench JSON files: median ms per kernel and the adaptive speedups, as a Markdown table.
`bench_table.py --runs DIR...` combines several runs of run_bench.sh (medians over the runs)."""
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


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--runs":
        over_runs(sys.argv[2:])
    else:
        main(sys.argv[1:])
        print()
        calibrate(sys.argv[1:])
