#!/usr/bin/python3
"""Summarizes tessel-gnn bench JSON files: median ms per kernel and the adaptive speedups, as a Markdown table."""
import json
import math
import sys


def main(paths):
    rows = []
    for p in paths:
        with open(p) as f:
            d = json.load(f)
        for r in d["results"]:
            rows.append((d["dataset"], d["nodes"], d["nnz"], r))
    kernels = ["csr", "csr_feature_tiled", "coo", "tiles", "dense", "kk", "csr(reordered)", "adaptive"]
    print("| graph | nodes | nnz | F | " + " | ".join(kernels) + " | best single | adaptive vs best | vs kk |")
    print("|" + "---|" * (len(kernels) + 7))
    geo = {}
    for name, n, nnz, r in rows:
        ms = r["median_ms"]
        cells = [f"{ms[k]:.3f}" if k in ms else "-" for k in kernels]
        best = r.get("best_single", "-")
        s_best = r.get("speedup_vs_best_single", float("nan"))
        s_kk = r.get("adaptive_speedup", {}).get("kk", float("nan"))
        print(f"| {name} | {n} | {nnz} | {r['features']} | " + " | ".join(cells) +
              f" | {best} | {s_best:.2f}x | {s_kk:.2f}x |")
        geo.setdefault(r["features"], []).append((s_best, s_kk))
    print()
    for f in sorted(geo):
        v = [x for x in geo[f] if not math.isnan(x[0])]
        if not v:
            continue
        gb = math.exp(sum(math.log(a) for a, _ in v) / len(v))
        gk = math.exp(sum(math.log(b) for _, b in v if not math.isnan(b)) / len(v))
        worst = min(a for a, _ in v)
        print(f"F = {f}: geometric mean speedup of adaptive over the best single kernel {gb:.2f}x "
              f"(worst graph {worst:.2f}x), over Kokkos Kernels spmv {gk:.2f}x, {len(v)} graphs")




def calibrate(paths):
    """Effective rates (GFLOP/s per stored element) of the class kernels timed by the adaptive tuner: the data
    behind CostModel's defaults."""
    rates = {"csr": [], "tiles": [], "dense": []}
    for p in paths:
        with open(p) as f:
            d = json.load(f)
        for r in d["results"]:
            plan, fw = r.get("plan"), r["features"]
            if not plan:
                continue
            for c in plan["classes"]:
                elements = {"csr": c["nnz"], "tiles": c["tiles"] * 128, "dense": c["dense_elements"]}
                for k, t in c["measured"].items():
                    if t and t > 2e-5:  # classes timed below 20 us are mostly overhead
                        rates[k].append(2.0 * elements[k] * fw / t * 1e-9)
    for k, v in rates.items():
        if v:
            v.sort()
            print(f"{k}: median {v[len(v) // 2]:.1f} GFLOP/s per stored element over {len(v)} timed classes "
                  f"(range {v[0]:.1f} .. {v[-1]:.1f})")


if __name__ == "__main__":
    main(sys.argv[1:])
    print()
    calibrate(sys.argv[1:])
