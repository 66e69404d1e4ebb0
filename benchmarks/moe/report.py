#!/usr/bin/env python3
"""Prints tessel-moe-bench JSON results side by side: per (model, M) and rank count, comet's speedup over
sequential and over pipelined and the hidden-communication fraction of pipelined and comet.

Several files of the same rank count (repeated sweeps) are combined: each figure is the median over the runs,
with the range over the runs in brackets, since timings on a shared machine move by 10-20% from run to run."""
import json
import statistics
import sys

FIGURES = [
    ("share", "share", lambda v: f"{v:.2f}"),
    ("comet/seq", "speedup_comet_vs_sequential", lambda v: f"{v:.2f}x"),
    ("comet/pipe", "speedup_comet_vs_pipelined", lambda v: f"{v:.2f}x"),
    ("hidden pipe", "hidden_pipelined", lambda v: f"{100 * v:.0f}%"),
    ("hidden comet", "hidden_comet", lambda v: f"{100 * v:.0f}%"),
]


def cell(values, fmt):
    if not values:
        return "-"
    text = fmt(statistics.median(values))
    if len(values) > 1:
        text += f" [{fmt(min(values))}-{fmt(max(values))}]"
    return text


def main(paths):
    runs = [json.load(open(p)) for p in paths]
    by_ranks = {}
    for run in runs:
        by_ranks.setdefault(run["ranks"], []).append(run)
    keys = []
    for run in runs:
        for p in run["points"]:
            k = (p["model"], p["M"])
            if k not in keys:
                keys.append(k)
    head = ["model", "M"]
    for w, group in by_ranks.items():
        suffix = f" (W={w}, {len(group)} runs)" if len(group) > 1 else f" (W={w})"
        head += [name + suffix for name, _, _ in FIGURES]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for model, m in keys:
        row = [model, str(m)]
        for group in by_ranks.values():
            points = [q for run in group for q in run["points"] if q["model"] == model and q["M"] == m]
            row += [cell([q[field] for q in points], fmt) for _, field, fmt in FIGURES]
        print("| " + " | ".join(row) + " |")
    wrong = sum(p["wrong"] for run in runs for p in run["points"])
    print(f"\n#wrong (outputs of pipelined/comet differing from sequential by > 1e-5 relative): {wrong}")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: report.py moe_w2.json [moe_w4.json ...]  (several runs of one rank count: medians)")
    main(sys.argv[1:])
