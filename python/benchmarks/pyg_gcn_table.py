"""The table of run_pyg_gcn.sh: per data set and thread count, PyG's GCNConv vs Tessel's: the median over the runs
of each run's median epoch, their ratio, the median first epoch (graph preprocessing and, for Tessel, the handle's
tuning) and the mean test accuracy over the runs (each run a seed; seeds that ran with both layers only)."""
import glob
import json
import sys

import numpy as np

rows = {}
for path in glob.glob(f"{sys.argv[1]}/gcn-*-t*-s*.json"):
    for r in json.load(open(path))["results"]:
        rows.setdefault((r["dataset"], r["threads"], r["layer"]), []).append(r)
print("| data set (nodes, entries, features) | threads | PyG ms/epoch | Tessel ms/epoch | PyG / Tessel | first epoch "
      "PyG / Tessel ms | PyG test acc | Tessel test acc | runs |")
print("|---|---|---|---|---|---|---|---|---|")
for (name, threads) in sorted({(k[0], k[1]) for k in rows}, key=lambda k: (k[0], k[1])):
    p, t = rows.get((name, threads, "pyg"), []), rows.get((name, threads, "tessel"), [])
    seeds = {r["seed"] for r in p} & {r["seed"] for r in t}  # runs of both layers only: same seeds, same masks
    p, t = [r for r in p if r["seed"] in seeds], [r for r in t if r["seed"] in seeds]
    if not seeds:
        continue
    pm = float(np.median([r["median_epoch_ms"] for r in p]))
    tm = float(np.median([r["median_epoch_ms"] for r in t]))
    pf = float(np.median([r["first_epoch_ms"] for r in p]))
    tf = float(np.median([r["first_epoch_ms"] for r in t]))
    pa = 100 * float(np.mean([r["test_accuracy"] for r in p]))
    ta = 100 * float(np.mean([r["test_accuracy"] for r in t]))
    r0 = p[0]
    runs = len(seeds)
    feats = f"{r0['features']}{' random' if r0.get('random_features') else ''}"
    print(f"| {name} ({r0['nodes']}, {r0['edges']}, {feats}) | {threads} | {pm:.2f} | {tm:.2f} | {pm / tm:.2f}x | "
          f"{pf:.0f} / {tf:.0f} | {pa:.1f}% | {ta:.1f}% | {runs} |")
