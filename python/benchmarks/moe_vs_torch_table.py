"""The table of run_moe_vs_torch.sh: per model, tokens and kind (forward, training step), the median over the runs
of each run's median time of the PyTorch layer and of Tessel's schedules, and the median over the runs of each run's
ratio PyTorch / Tessel (the runs' speeds differ more between processes than within one)."""
import glob
import json
import sys

import numpy as np

rows = {}
for path in sorted(glob.glob(f"{sys.argv[1]}/moe-*.json")):
    for r in json.load(open(path))["results"]:
        rows.setdefault((r["model"], r["tokens"], r["kind"]), []).append(r)
variants = ["torch", "tessel-sequential", "tessel-pipelined", "tessel-comet"]
print("| model (N, K, E, topk) | M | step | PyTorch ms | Tessel sequential ms | Tessel pipelined ms | Tessel comet ms "
      "| PyTorch / comet | PyTorch / best Tessel | runs |")
print("|---|---|---|---|---|---|---|---|---|---|")
for (model, m, kind), rs in rows.items():
    med = {v: float(np.median([r["median_ms"][v] for r in rs])) for v in variants if v in rs[0]["median_ms"]}
    def ratio(r, best=False):
        t = r["median_ms"]
        return t["torch"] / (min(v for k, v in t.items() if k != "torch") if best else t["tessel-comet"])

    r0 = rs[0]
    cells = " | ".join(f"{med[v]:.1f}" if v in med else "-" for v in variants)
    comet = f"{np.median([ratio(r) for r in rs]):.2f}x" if "tessel-comet" in med else "-"
    print(f"| {model} ({r0['N']}, {r0['K']}, {r0['E']}, {r0['topk']}) | {m} | {kind} | {cells} | {comet} | "
          f"{np.median([ratio(r, True) for r in rs]):.2f}x | {len(rs)} |")
