#!/usr/bin/env python3
"""Prints tessel-moe-bench JSON results side by side: per (model, M), for each rank count, comet's speedup over
sequential and over pipelined and the hidden-communication fraction of pipelined and comet."""
import json
import sys


def main(paths):
    runs = [json.load(open(p)) for p in paths]
    keys = []
    for run in runs:
        for p in run["points"]:
            k = (p["model"], p["M"])
            if k not in keys:
                keys.append(k)
    head = ["model", "M"]
    for run in runs:
        w = run["ranks"]
        head += [f"W={w} share", f"W={w} comet/seq", f"W={w} comet/pipe", f"W={w} hidden pipe", f"W={w} hidden comet"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for model, m in keys:
        row = [model, str(m)]
        for run in runs:
            p = next((q for q in run["points"] if q["model"] == model and q["M"] == m), None)
            if p is None:
                row += ["-"] * 5
                continue
            row += [f"{p['share']:.2f}", f"{p['speedup_comet_vs_sequential']:.2f}x",
                    f"{p['speedup_comet_vs_pipelined']:.2f}x", f"{100 * p['hidden_pipelined']:.0f}%",
                    f"{100 * p['hidden_comet']:.0f}%"]
        print("| " + " | ".join(row) + " |")
    wrong = sum(p["wrong"] for run in runs for p in run["points"])
    print(f"\n#wrong (outputs of pipelined/comet differing from sequential by > 1e-5 relative): {wrong}")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: report.py moe_w2.json [moe_w4.json ...]")
    main(sys.argv[1:])
