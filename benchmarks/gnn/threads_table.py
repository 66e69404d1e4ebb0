#!/usr/bin/env python3
"""Table of `tessel-gnn-bench` thread scaling: reads threads-<graph>-t<T>-r<run>.json from a folder (written by
run_threads.sh) and prints, per graph and feature width, each kernel's median time over the runs at every thread
count and the speedup of the largest thread count over one thread (median of the per-run ratios)."""
import glob
import json
import os
import re
import statistics
import sys


def main():
    folder = sys.argv[1] if len(sys.argv) > 1 else "."
    runs = {}  # (graph, features, kernel) -> {threads: {run: ms}}
    nnz = {}
    for path in glob.glob(os.path.join(folder, "threads-*-t*-r*.json")):
        m = re.match(r"threads-(.+)-t(\d+)-r(\d+)\.json$", os.path.basename(path))
        if not m:
            continue
        graph, threads, run = m.group(1), int(m.group(2)), int(m.group(3))
        with open(path) as f:
            d = json.load(f)
        nnz[graph] = d["nnz"]
        for r in d["results"]:
            for kernel, ms in r["median_ms"].items():
                runs.setdefault((graph, r["features"], kernel), {}).setdefault(threads, {})[run] = ms
    if not runs:
        sys.exit(f"threads_table.py: no threads-*.json in {folder}")
    counts = sorted({t for v in runs.values() for t in v})
    lo, hi = counts[0], counts[-1]
    print(f"| graph (entries) | F | kernel | " + " | ".join(f"{t} thr ms" for t in counts) +
          f" | {hi} thr / {lo} thr |")
    print("|---|---|---|" + "---|" * len(counts) + "---|")
    for (graph, f, kernel) in sorted(runs):
        per = runs[(graph, f, kernel)]
        cells = [f"{statistics.median(per[t].values()):.3f}" if t in per else "-" for t in counts]
        ratios = [per[lo][r] / per[hi][r] for r in per.get(lo, {}) if r in per.get(hi, {})]
        speed = f"{statistics.median(ratios):.2f}x [{min(ratios):.2f}-{max(ratios):.2f}]" if ratios else "-"
        print(f"| {graph} ({nnz[graph]}) | {f} | {kernel} | " + " | ".join(cells) + f" | {speed} |")


if __name__ == "__main__":
    main()
