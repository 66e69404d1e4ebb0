#!/usr/bin/env python3
"""Plots a `tessel-sched simulate --json` result: JCT CDFs of the finished jobs and cluster throughput over time.

usage: /usr/bin/python3 plot_sched.py RESULT.json [--out DIR] [--prefix NAME] [--smooth ROUNDS]

Writes DIR/NAME_jct_cdf.png and DIR/NAME_throughput.png (NAME defaults to the JSON file's stem).
"""

import argparse
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

STYLE = {
    "crius": ("#3C76AF", "-"),
    "fcfs": ("#8E7BA0", ":"),
    "elasticflow": ("#EE8636", "--"),
    "gavel": ("#549E3F", "--"),
    "sia": ("#666666", "-."),
}


def load(path):
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        sys.exit(f"plot_sched.py: cannot read {path}: {e}")
    if "policies" not in data or not data["policies"]:
        sys.exit(f"plot_sched.py: {path} has no 'policies' (not a tessel-sched simulate result)")
    return data


def smooth(values, window):
    if window <= 1 or len(values) < window:
        return np.asarray(values, dtype=float)
    kernel = np.ones(window) / window
    half = window // 2
    padded = np.pad(np.asarray(values, dtype=float), (half, window - 1 - half), mode="edge")
    return np.convolve(padded, kernel, mode="valid")


def plot_jct_cdf(data, path):
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=150)
    for name, res in data["policies"].items():
        jct = np.sort(np.asarray(res.get("jct", []), dtype=float)) / 3600.0
        if jct.size == 0:
            continue
        color, ls = STYLE.get(name, (None, "-"))
        frac = np.arange(1, jct.size + 1) / jct.size
        label = f"{name} ({jct.size} finished, avg {jct.mean():.1f} h)"
        ax.step(jct, frac, where="post", color=color, linestyle=ls, linewidth=2, label=label)
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (hours, log scale)")
    ax.set_ylabel("fraction of finished jobs")
    ax.set_ylim(0, 1.01)
    ax.grid(True, which="both", color="lightgray", linestyle="--", linewidth=0.5)
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title("JCT CDF of finished jobs")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_throughput(data, path, window):
    fig, ax = plt.subplots(figsize=(10, 4), dpi=150)
    for name, res in data["policies"].items():
        t = np.asarray(res.get("round_time", []), dtype=float)
        thr = np.asarray(res.get("throughput", []), dtype=float)
        if t.size == 0:
            continue
        hours = (t - t[0]) / 3600.0
        color, ls = STYLE.get(name, (None, "-"))
        ax.plot(hours, smooth(thr, window), color=color, linestyle=ls, linewidth=1.5,
                label=f"{name} (avg {res.get('avg_throughput', 0):.0f}, peak {res.get('peak_throughput', 0):.0f})")
    ax.set_xlabel("time (hours)")
    ax.set_ylabel("cluster throughput (samples/s)")
    ax.grid(True, color="lightgray", linestyle="--", linewidth=0.5)
    ax.legend(fontsize=8, ncol=2)
    ax.set_title(f"cluster throughput ({window}-round moving average)")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("result")
    parser.add_argument("--out", default=".")
    parser.add_argument("--prefix", default=None)
    parser.add_argument("--smooth", type=int, default=5, help="moving-average window in rounds (default 5)")
    args = parser.parse_args()
    data = load(args.result)
    prefix = args.prefix or os.path.splitext(os.path.basename(args.result))[0]
    os.makedirs(args.out, exist_ok=True)
    cdf = os.path.join(args.out, f"{prefix}_jct_cdf.png")
    thr = os.path.join(args.out, f"{prefix}_throughput.png")
    plot_jct_cdf(data, cdf)
    plot_throughput(data, thr, args.smooth)
    print(f"wrote {cdf} and {thr}")


if __name__ == "__main__":
    main()
