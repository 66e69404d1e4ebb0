#!/usr/bin/python3
"""tessel-sched serve's cost per round at Crius's scale (1,280 GPUs: A100 80x4, V100 20x16, A40 160x2, A10 160x2)
with hundreds of jobs running and waiting, against a stand-in for Slurm's CLIs (mock_slurm.py: the same JSON, no
daemons, no processes per job).

    benchmarks/sched/controller_scale.py BUILD_DIR OUT_DIR [--jobs 1000] [--rounds 30] [--round 2] [--policy crius] [--min-s 60] [--max-s 180]

Jobs: Arena's synthetic mix (tessel-sched-data synth) for the 1,280-GPU cluster, all journaled at the start as
`tessel-sched submit` would (written directly: 1,000 submits would reload the profile tables 1,000 times); each runs
60-180 s of wall time (--min-s, --max-s). Prints the controller's decision time per round (the policy alone, what the 100 ms goal is
about) and its whole round (reading the state, deciding, enacting; includes the mock CLIs' Python start-up, about
30-60 ms a call, which Slurm's C CLIs do not pay), with the running and pending counts it saw.
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
             for t, n, g in GROUPS for k in range(n)]
    mock_state = os.path.join(out, "mock.json")
    json.dump({"nodes": nodes, "jobs": [], "next_id": 0, "duration": [a.min_s, a.max_s]}, open(mock_state, "w"))
    env = dict(os.environ, MOCK_SLURM_STATE=mock_state, PATH=bindir + ":" + os.environ["PATH"])

    sched = os.path.abspath(os.path.join(a.build, "apps", "sched", "tessel-sched"))
    synth = os.path.abspath(os.path.join(a.build, "datasets", "sched", "tessel-sched-data"))
    trace = os.path.join(out, "jobs.csv")
    subprocess.run([synth, "synth", trace, "--jobs", str(a.jobs), "--cluster", "crius", "--profile", profile],
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
    print("%d jobs journaled; after %d rounds: %s" % (a.jobs, c["rounds"], status["counts"]))
    print("decision (policy) per round: median %.2f ms, max %.2f ms (the slowest saw %s)"
          % (c["decide_ms_median"], c["decide_ms_max"], c["slowest_decision_saw"]))
    # Rounds at load: at least 300 running and 300 pending jobs (the first round, 1,000+ arrivals on an empty
    # cluster, is reported apart).
    at_load = [ms for ms, run, pend in c["recent_decisions"][1:] if run >= 300 and pend >= 300]
    if at_load:
        print("decisions at >= 300 running and >= 300 pending: %d rounds, median %.2f ms, max %.2f ms; first round "
              "(%d arrivals): %.2f ms" % (len(at_load), statistics.median(at_load), max(at_load), a.jobs,
                                          c["recent_decisions"][0][0]))
    print("whole round (read + decide + enact, mock CLIs): median %.0f ms, max %.0f ms"
          % (c["round_ms_median"], c["round_ms_max"]))
    json.dump(status["cost"] | {"counts": status["counts"], "jobs": a.jobs, "policy": a.policy},
              open(os.path.join(out, "cost.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
