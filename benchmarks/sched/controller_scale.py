#!/usr/bin/python3
"""tessel-sched serve's cost per round at Crius's scale (1,280 GPUs: A100 80x4, V100 20x16, A40 160x2, A10 160x2, or
--scale times as many nodes of each type: --scale 8 is 10,240 GPUs on 3,360 nodes) with hundreds or thousands of jobs
running and waiting, against a stand-in for Slurm's CLIs (mock_slurm.py: the same JSON, no daemons, no processes per
job).

    benchmarks/sched/controller_scale.py BUILD_DIR OUT_DIR [--jobs 1000] [--rounds 30] [--round 2] [--policy crius]
        [--min-s 60] [--max-s 180] [--scale 1] [--load 300]

Jobs: Arena's synthetic mix (tessel-sched-data synth) for the cluster, all journaled at the start as `tessel-sched
submit` would (written directly: 1,000 submits would reload the profile tables 1,000 times); each runs 60-180 s of
wall time (--min-s, --max-s). Prints the controller's decision time per round (the policy alone, what the 100 ms goal
is about), over the rounds "at load" (at least --load running and --load pending jobs), and its whole round (reading
the state, deciding, enacting; includes the mock CLIs' Python start-up, about 30-60 ms a call, which Slurm's C CLIs
do not pay), and that round less the time spent waiting for the CLIs (the controller's own work), with the running
and pending counts it saw.
"""

import argparse
import csv
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
GROUPS = [("a100", 80, 4), ("v100", 20, 16), ("a40", 160, 2), ("a10", 160, 2)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("out")
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--round", type=float, default=2)
    ap.add_argument("--policy", default="crius")
    ap.add_argument("--min-s", type=float, default=60)
    ap.add_argument("--max-s", type=float, default=180)
    ap.add_argument("--scale", type=int, default=1, help="nodes of each type: Crius's count times this")
    ap.add_argument("--load", type=int, default=300, help="running and pending jobs a round at load has at least")
    a = ap.parse_args()
    data = os.environ.get("TESSEL_DATA_DIR", os.path.join(ROOT, "..", "shared", "datasets"))
    profile = os.path.join(data, "traces", "crius")
    out = os.path.abspath(a.out)
    shutil.rmtree(out, ignore_errors=True)
    bindir, state = os.path.join(out, "bin"), os.path.join(out, "state")
    os.makedirs(bindir)
    for cmd in ("sinfo", "squeue", "sbatch", "scancel"):
        os.symlink(os.path.join(HERE, "mock_slurm.py"), os.path.join(bindir, cmd))
    nodes = [{"name": "%s-%03d" % (t, k), "gres": "gpu:%s:%d" % (t, g), "state": "idle", "state_flags": []}
             for t, n, g in GROUPS for k in range(n * a.scale)]
    mock_state = os.path.join(out, "mock.json")
    json.dump({"nodes": nodes, "jobs": [], "next_id": 0, "duration": [a.min_s, a.max_s]}, open(mock_state, "w"))
    env = dict(os.environ, MOCK_SLURM_STATE=mock_state, PATH=bindir + ":" + os.environ["PATH"])

    sched = os.path.abspath(os.path.join(a.build, "apps", "sched", "tessel-sched"))
    synth = os.path.abspath(os.path.join(a.build, "apps", "sched", "tessel-sched-data"))
    trace = os.path.join(out, "jobs.csv")
    cluster = "crius"
    if a.scale != 1:
        cluster = os.path.join(out, "cluster.csv")
        with open(cluster, "w") as f:
            f.write("gpu_type,num_nodes,gpus_per_node\n")
            for t, n, g in GROUPS:
                f.write("%s,%d,%d\n" % (t, n * a.scale, g))
    subprocess.run([synth, "synth", trace, "--jobs", str(a.jobs), "--cluster", cluster, "--profile", profile],
                   check=True, capture_output=True)
    # The controller's first round creates the state folder; the jobs are journaled before it (time 0).
    os.makedirs(state)
    with open(os.path.join(state, "jobs.journal"), "w") as f:
        for k, r in enumerate(csv.DictReader(open(trace))):
            spec = {"name": "j%04d" % k, "model": r["model_name"], "batch_size": int(r["batch_size"]),
                    "iterations": int(float(r["num_iteration"])), "gpus": int(r["num_gpu"]),
                    "gpu_type": r["gpu_type"], "command": "true"}
            f.write(json.dumps({"op": "submit", "time": time.time(), "spec": spec}) + "\n")
    log = os.path.join(out, "serve.log")
    subprocess.run([sched, "serve", "--backend", "slurm", "--state", state, "--policy", a.policy, "--profile", profile,
                    "--round", str(a.round), "--time-scale", "150", "--rounds", str(a.rounds)],
                   env=env, stdout=open(log, "w"), stderr=subprocess.STDOUT, check=True)
    status = json.load(open(os.path.join(state, "status.json")))
    c = status["cost"]
    gpus = sum(n * a.scale * g for _, n, g in GROUPS)
    print("%d GPUs on %d nodes, %d jobs journaled; after %d rounds: %s"
          % (gpus, len(nodes), a.jobs, c["rounds"], status["counts"]))
    print("decision (policy) per round: median %.2f ms, max %.2f ms (the slowest saw %s)"
          % (c["decide_ms_median"], c["decide_ms_max"], c["slowest_decision_saw"]))
    # Rounds at load: at least --load running and --load pending jobs (the first round, every job arriving on an
    # empty cluster, is reported apart).
    at_load = [(ms, run, pend) for ms, run, pend in c["recent_decisions"][1:] if run >= a.load and pend >= a.load]
    if at_load:
        slowest = max(at_load)
        print("decisions at >= %d running and >= %d pending: %d rounds, median %.2f ms, max %.2f ms (%d running, "
              "%d pending); first round (%d arrivals): %.2f ms"
              % (a.load, a.load, len(at_load), statistics.median(ms for ms, _, _ in at_load), slowest[0],
                 slowest[1], slowest[2], a.jobs, c["recent_decisions"][0][0]))
    else:
        print("no round had >= %d running and >= %d pending jobs: raise --jobs or --min-s" % (a.load, a.load))
    print("whole round (read + decide + enact, mock CLIs): median %.0f ms, max %.0f ms; less the time waiting for "
          "the CLIs (parsing their JSON, reconciling, deciding, writing plans, scripts, journal and status): "
          "median %.0f ms, max %.0f ms"
          % (c["round_ms_median"], c["round_ms_max"], c["own_ms_median"], c["own_ms_max"]))
    json.dump(status["cost"] | {"counts": status["counts"], "jobs": a.jobs, "policy": a.policy, "gpus": gpus,
                                "nodes": len(nodes)},
              open(os.path.join(out, "cost.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
