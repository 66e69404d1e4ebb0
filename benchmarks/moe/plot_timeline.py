#!/usr/bin/python3
"""Draws the timelines tessel-moe-bench --trace PREFIX wrote (PREFIX.<model>.<M>.rank<r>.json), or tessel-moe --trace
PREFIX (PREFIX.rank<r>.json), as one PNG per point:
for each schedule (sequential, pipelined, comet) one row per rank on a shared time axis, with the forward's and the
backward's compute (tiles, expert GEMMs, weight-gradient GEMMs), the compute thread's waits for data, and the moments
messages landed.

    /usr/bin/python3 benchmarks/moe/plot_timeline.py PREFIX [OUT_DIR]
"""
import glob
import json
import os
import re
import sys

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch
except ImportError:
    sys.exit("plot_timeline.py needs matplotlib (Debian: apt-get install python3-matplotlib)")

SCHEDULES = ["sequential", "pipelined", "comet"]
COLORS = {"fwd": "#4878cf", "bwd": "#6acc65", "weights": "#c4ad66", "wait": "#d65f5f", "comm": "#b0b0b0",
          "other": "#956cb4"}


def kind(what, phase):
    if what.startswith("wait"):
        return "wait"
    if what.startswith("landed"):
        return None
    if "all-to-all" in what:
        return "comm"
    if what.startswith("weight grads"):
        return "weights"
    if what.startswith(("layer0", "layer1", "experts", "grad tile")):
        return "fwd" if phase == "forward" else "bwd"
    return "other"


def plot_point(files, out_path, title):
    ranks = [json.load(open(f)) for f in sorted(files, key=lambda f: int(re.search(r"rank(\d+)", f).group(1)))]
    rows = [(s, r) for s in SCHEDULES for r in range(len(ranks)) if s in ranks[r].get("schedules", {})]
    fig, ax = plt.subplots(figsize=(13, 0.55 * len(rows) + 1.6))
    end = 0.0
    for y, (s, r) in enumerate(rows):
        entry = ranks[r]["schedules"][s]
        for phase in ("forward", "backward"):
            for e in entry.get(phase, []):
                b, t = 1e3 * e["begin"], 1e3 * e["end"]
                end = max(end, t)
                k = kind(e["what"], phase)
                if k is None:
                    ax.plot([b, b], [y - 0.42, y + 0.42], color="black", linewidth=0.6)
                else:
                    ax.barh(y, max(t - b, 1e-4), left=b, height=0.7, color=COLORS[k], edgecolor="none")
        if "backward_total" in entry:
            ax.plot([1e3 * entry["forward_total"]] * 2, [y - 0.5, y + 0.5], color="black", linestyle=":",
                    linewidth=1.0)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(["%s rank %d" % (s, r) for s, r in rows])
    ax.invert_yaxis()
    ax.set_xlabel("ms since the forward started (dotted: forward ends, backward starts)")
    ax.set_xlim(0, end * 1.02 if end > 0 else 1)
    ax.set_title(title)
    handles = [Patch(color=COLORS["fwd"], label="forward compute"), Patch(color=COLORS["bwd"], label="backward compute"),
               Patch(color=COLORS["weights"], label="weight gradients"), Patch(color=COLORS["comm"],
                                                                                label="blocking all-to-all"),
               Patch(color=COLORS["wait"], label="waiting for data"), Patch(color=COLORS["other"], label="other"),
               plt.Line2D([0], [0], color="black", linewidth=0.8, label="message landed")]
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.12 - 0.3 / max(len(rows), 1)), ncol=7,
              fontsize=8, frameon=False)
    fig.tight_layout()
    fig.savefig(out_path, dpi=120)
    plt.close(fig)


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    prefix = sys.argv[1]
    out_dir = sys.argv[2] if len(sys.argv) > 2 else os.path.dirname(prefix) or "."
    points = {}
    for f in glob.glob(glob.escape(prefix) + "*.rank*.json"):
        point = re.sub(r"\.rank\d+\.json$", "", f)
        points.setdefault(point, []).append(f)
    if not points:
        sys.exit("no traces %s[.<model>.<M>].rank<r>.json (run tessel-moe-bench or tessel-moe with --trace %s)"
                 % (prefix, prefix))
    for point, files in sorted(points.items()):
        name = os.path.basename(point)
        out = os.path.join(out_dir, name + ".png")
        label = name[len(os.path.basename(prefix)):].lstrip(".") or name
        plot_point(files, out, label + " (%d ranks)" % len(files))
        print(out)


if __name__ == "__main__":
    main()
