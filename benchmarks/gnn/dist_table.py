#!/usr/bin/env python3
"""Tables of benchmarks/gnn/run_dist_training.sh: the epoch per phase at 1 and 2 ranks (medians over the runs) with
the speedups, the halo bytes and partitioning time per partition method, and the hidden fraction of the halo exchange
over the emulated link."""
import glob
import json
import os
import re
import statistics
import sys


def load(out):
    runs = {}
    for path in glob.glob(os.path.join(out, "*-run*.json")):
        key = re.sub(r"-run[0-9]+\.json$", "", os.path.basename(path))
        with open(path) as f:
            runs.setdefault(key, []).append(json.load(f))
    return runs


def median(runs, field):
    return statistics.median(r[field] for r in runs)


def phases(runs):
    """ms per epoch: aggregation, dense layers and the rest, exposed communication, total."""
    total = median(runs, "ms_per_epoch")
    agg = median(runs, "aggregation_ms_per_epoch")
    comm = median(runs, "communication_ms_per_epoch") if "communication_ms_per_epoch" in runs[0] else 0.0
    dense = statistics.median(r["ms_per_epoch"] - r["aggregation_ms_per_epoch"] - r.get("communication_ms_per_epoch", 0)
                              for r in runs)
    return agg, dense, comm, total


def main():
    out = sys.argv[1]
    runs = load(out)
    graphs = sorted({k.split("-")[0] for k in runs})
    print("Strong scaling of one epoch (GCN, 64 random features, 16 hidden; ms, medians of %d runs; 1 rank = the "
          "single-process model, 2 ranks = one core each)" % max(len(v) for v in runs.values()))
    print("| graph | kernel | partition | 1 rank: agg / dense / comm / total | 2 ranks: agg / dense / comm / total "
          "| speedup agg / dense / total |")
    print("|---|---|---|---|---|---|")
    for g in graphs:
        for kernel in ("csr", "adaptive"):
            one = runs.get("%s-%s-w1" % (g, kernel))
            if not one:
                continue
            a1, d1, c1, t1 = phases(one)
            for part in ("metis", "contiguous"):
                two = runs.get("%s-%s-w2-%s" % (g, kernel, part))
                if not two:
                    continue
                a2, d2, c2, t2 = phases(two)
                print("| %s | %s | %s | %.2f / %.2f / %.2f / %.2f | %.2f / %.2f / %.2f / %.2f | %.2fx / %.2fx / %.2fx |"
                      % (g, kernel, part, a1, d1, c1, t1, a2, d2, c2, t2, a1 / a2, d1 / d2, t1 / t2))
    print()
    print("Halo rows received per epoch (rank 0, MB) and partitioning time (s)")
    print("| graph | ranks | metis MB | contiguous MB | metis / contiguous | metis s | contiguous s |")
    print("|---|---|---|---|---|---|---|")
    for g in graphs:
        for w in (2, 4):
            m = runs.get("%s-csr-w%d-metis" % (g, w))
            c = runs.get("%s-csr-w%d-contiguous" % (g, w))
            if not m or not c:
                continue
            mb_m, mb_c = median(m, "halo_bytes_per_epoch") / 1e6, median(c, "halo_bytes_per_epoch") / 1e6
            print("| %s | %d | %.2f | %.2f | %.2f | %.3f | %.3f |" % (g, w, mb_m, mb_c, mb_m / mb_c if mb_c else 0,
                                                                     median(m, "partition_seconds"),
                                                                     median(c, "partition_seconds")))
    links = sorted({int(m.group(1)) for k in runs for m in [re.match(r"facebook-csr-w2-link([0-9]+)-", k)] if m})
    if links:
        print()
        print("Overlap over an emulated link (facebook, csr, 2 ranks; ms per epoch; hidden = 1 - overlapped halo waits "
              "/ sequential halo waits)")
        print("| link MB/s | sequential epoch | its halo waits | share of the epoch | overlapped epoch | its halo waits "
              "| hidden | epoch speedup |")
        print("|---|---|---|---|---|---|---|---|")
    for bw in links:
        seq = runs.get("facebook-csr-w2-link%d-sequential" % bw)
        ovl = runs.get("facebook-csr-w2-link%d-overlapped" % bw)
        if not seq or not ovl:
            continue
        ws, wo = median(seq, "halo_wait_ms_per_epoch"), median(ovl, "halo_wait_ms_per_epoch")
        ts, to = median(seq, "ms_per_epoch"), median(ovl, "ms_per_epoch")
        print("| %d | %.2f | %.2f | %.0f%% | %.2f | %.2f | %.0f%% | %.2fx |" % (bw, ts, ws, 100 * ws / ts, to, wo,
                                                                            100 * (1 - wo / ws) if ws else 0, ts / to))

if __name__ == "__main__":
    main()
