#!/usr/bin/python3
"""Live Slurm vs the simulator: one trace replayed on a real local Slurm cluster by `tessel-sched serve` and
simulated by `tessel-sched simulate` on the same cluster, trace and time scale, for each policy.

    benchmarks/sched/replay_slurm.py BUILD_DIR OUT_DIR [--policies crius,fcfs] [--jobs 40] [--rate 12]
                                     [--median-hours 1] [--round 3] [--time-scale 200] [--seed 1]

Needs root (the cluster is slurmctld + one slurmd per node in its own network namespace, see
unit_tests/sched/slurm_local.py). The cluster: 2 nodes x 4 A100 and 2 nodes x 4 V100. Jobs are Arena's synthetic
mix (`tessel-sched-data synth`), run by tessel-sched-trainer at the profile tables' throughputs (TESSEL_DATA_DIR or
../shared/datasets). Writes OUT_DIR/replay.json and prints the table (model seconds: wall seconds x time scale).
"""

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "unit_tests", "sched"))
from slurm_local import LocalSlurm  # noqa: E402

NODES = [("a1", "a100", 4), ("a2", "a100", 4), ("v1", "v100", 4), ("v2", "v100", 4)]


def tool(build, name):
    for sub in ("apps/sched", "datasets/sched", "benchmarks/sched"):
        p = os.path.join(build, sub, name)
        if os.path.exists(p):
            return os.path.abspath(p)
    sys.exit("replay_slurm.py: %s not built in %s" % (name, build))


def run(argv, **kw):
    p = subprocess.run(argv, capture_output=True, text=True, **kw)
    if p.returncode != 0:
        sys.exit("replay_slurm.py: %s failed: %s" % (" ".join(argv), p.stderr.strip()))
    return p.stdout


def make_trace(a, out, data):
    cluster = os.path.join(out, "cluster.csv")
    with open(cluster, "w") as f:
        f.write("gpu_type,num_nodes,gpus_per_node\na100,2,4\nv100,2,4\n")
    raw = os.path.join(out, "synth.csv")
    run([tool(a.build, "tessel-sched-data"), "synth", raw, "--jobs", str(a.jobs), "--rate", str(a.rate),
         "--median-hours", str(a.median_hours), "--seed", str(a.seed), "--cluster", cluster, "--profile",
         os.path.join(data, "traces", "crius")])
    rows = list(csv.DictReader(open(raw)))
    t_first = min(float(r["submission_time"]) for r in rows)
    trace = os.path.join(out, "trace.csv")
    with open(trace, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        for k, r in enumerate(rows):
            r["submission_time"] = "%.3f" % (float(r["submission_time"]) - t_first)  # the first job at 0
            r["job_id"] = "j%02d" % k
            r["deadline"] = ""
            w.writerow(r)
    return cluster, trace, list(csv.DictReader(open(trace)))


def live(a, policy, trace_rows, out, data):
    work = os.path.join(out, "live-" + policy)
    state = os.path.join(work, "state")
    os.makedirs(work, exist_ok=True)
    sched, trainer = tool(a.build, "tessel-sched"), tool(a.build, "tessel-sched-trainer")
    with LocalSlurm(os.path.join(work, "slurm"), NODES, instance=1) as slurm:  # beside a test cluster
        env = dict(slurm.env, PATH=os.path.dirname(trainer) + ":" + os.environ["PATH"])
        log = open(os.path.join(work, "serve.log"), "w")
        serve = subprocess.Popen([sched, "serve", "--backend", "slurm", "--state", state, "--partition", "main",
                                  "--policy", policy, "--profile", os.path.join(data, "traces", "crius"),
                                  "--round", str(a.round), "--time-scale", str(a.time_scale), "--until-done"],
                                 stdout=log, stderr=subprocess.STDOUT, env=env)
        while not os.path.exists(os.path.join(state, "config.json")):
            time.sleep(0.05)
        t0 = json.load(open(os.path.join(state, "config.json")))["t0"]
        # The controller's round 0 ran at t0; the simulator's round 0 is the first submission. Trace time s is
        # submitted just before the controller's round ceil(s / interval) + 1, which the simulator calls round
        # ceil(s / interval): the same decisions, one round later on the controller's clock.
        interval = a.round * a.time_scale
        for r in sorted(trace_rows, key=lambda r: float(r["submission_time"])):
            at = t0 + (float(r["submission_time"]) + interval) / a.time_scale - 0.1
            time.sleep(max(0.0, at - time.time()))
            spec = {"name": r["job_id"], "model": r["model_name"], "batch_size": int(r["batch_size"]),
                    "iterations": int(float(r["num_iteration"])), "gpus": int(r["num_gpu"]),
                    "gpu_type": r["gpu_type"]}
            p = subprocess.run([sched, "submit", "--state", state, "-"], input=json.dumps(spec), capture_output=True,
                               text=True)
            if p.returncode != 0:
                print("submit %s: %s" % (r["job_id"], p.stderr.strip()))
        serve.wait()
        status = json.load(open(os.path.join(state, "status.json")))
    # Times from the controller's clock: submission (as journaled) to the job's own finish. Shifted by one round
    # so that they read on the simulator's clock.
    jobs = {j["name"]: {"state": j["state"], "submit": j["submit_time"] - interval,
                        "jct": j["finish_time"] - j["submit_time"] if j["finish_time"] >= 0 else None,
                        "finish": j["finish_time"] - interval, "reschedules": j["reschedules"],
                        "attempts": j["attempt"]} for j in status["jobs"]}
    return jobs, status, launch_latencies(state, t0, a.time_scale)


def launch_latencies(state, t0, scale):
    """Wall seconds from each attempt's sbatch (the journal's launch record) to its trainer's start."""
    launched = {}
    for line in open(os.path.join(state, "controller.journal")):
        rec = json.loads(line)
        if rec["op"] == "launch":
            launched[(rec["job"], rec["attempt"])] = t0 + rec["now"] / scale
    out = []
    for (job, attempt), at in launched.items():
        path = os.path.join(state, "jobs", job, "slurm.%d.out" % attempt)
        if not os.path.exists(path):
            continue  # cancelled before it started
        for line in open(path):
            if "started at " in line:
                out.append(float(line.rsplit("started at ", 1)[1]) - at)
    return sorted(out)


def simulate(a, policy, cluster, trace, out, data, latency=0.0):
    path = os.path.join(out, "sim-%s%s.json" % (policy, "-latency" if latency else ""))
    run([tool(a.build, "tessel-sched"), "simulate", "--trace", trace, "--cluster", cluster, "--profile",
         os.path.join(data, "traces", "crius"), "--policy", policy, "--interval", str(a.round * a.time_scale),
         "--start-latency", str(latency), "--json", path, "--quiet"])
    return {j["id"]: {"state": j["state"], "jct": j["jct"] if j["state"] == "completed" else None,
                      "finish": j["finish_time"], "reschedules": j["reschedules"]}
            for j in json.load(open(path))["policies"][policy]["jobs"]}


def summary(jobs, trace_rows):
    jct = [j["jct"] for j in jobs.values() if j["state"] == "completed"]
    first = min(j.get("submit", float(r["submission_time"])) for r, j in
                ((r, jobs.get(r["job_id"], {})) for r in trace_rows))
    finish = [j["finish"] for j in jobs.values() if j["state"] == "completed"]
    return {"completed": len(jct), "avg_jct": statistics.mean(jct) if jct else 0,
            "makespan": max(finish) - first if finish else 0,
            "reschedules": sum(j["reschedules"] for j in jobs.values())}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("out")
    ap.add_argument("--policies", default="crius,fcfs")
    ap.add_argument("--jobs", type=int, default=40)
    ap.add_argument("--rate", type=float, default=12)
    ap.add_argument("--median-hours", type=float, default=1)
    ap.add_argument("--round", type=float, default=3)
    ap.add_argument("--time-scale", type=float, default=200)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    why = LocalSlurm.unavailable()
    if why:
        sys.exit("replay_slurm.py: " + why)
    data = os.environ.get("TESSEL_DATA_DIR", os.path.join(ROOT, "..", "shared", "datasets"))
    os.makedirs(a.out, exist_ok=True)
    cluster, trace, rows = make_trace(a, a.out, data)
    result = {"options": vars(a), "policies": {}}
    for policy in a.policies.split(","):
        t = time.time()
        live_jobs, status, latencies = live(a, policy, rows, a.out, data)
        wall = time.time() - t
        latency = statistics.median(latencies) * a.time_scale if latencies else 0.0
        sim_jobs = simulate(a, policy, cluster, trace, a.out, data)
        sim_lat_jobs = simulate(a, policy, cluster, trace, a.out, data, latency)
        result["policies"][policy] = {"live": summary(live_jobs, rows), "sim": summary(sim_jobs, rows),
                                      "sim_latency": summary(sim_lat_jobs, rows),
                                      "launch_latency_wall_s": latencies, "start_latency_model_s": latency,
                                      "live_wall_s": wall, "controller_cost": status["cost"],
                                      "live_jobs": live_jobs, "sim_jobs": sim_jobs, "sim_latency_jobs": sim_lat_jobs}
        print("%s: live run %.0f s wall" % (policy, wall), flush=True)
    json.dump(result, open(os.path.join(a.out, "replay.json"), "w"), indent=1)
    print("\n| policy | avg JCT live (s) | simulated | diff | makespan live | simulated | diff | "
          "reschedules live / sim | completed live / sim |")
    print("|---|---|---|---|---|---|---|---|---|")
    for p, r in result["policies"].items():
        lv, sm = r["live"], r["sim"]
        print("| %s | %.0f | %.0f | %+.1f %% | %.0f | %.0f | %+.1f %% | %d / %d | %d / %d |" % (
            p, lv["avg_jct"], sm["avg_jct"], 100 * (lv["avg_jct"] / sm["avg_jct"] - 1), lv["makespan"],
            sm["makespan"], 100 * (lv["makespan"] / sm["makespan"] - 1), lv["reschedules"], sm["reschedules"],
            lv["completed"], sm["completed"]))
    print("\n| policy | rounds | round (read + decide + enact) median / max ms | decision median / max ms |")
    print("|---|---|---|---|")
    for p, r in result["policies"].items():
        c = r["controller_cost"]
        print("| %s | %d | %.1f / %.1f | %.2f / %.2f |" % (p, c["rounds"], c["round_ms_median"], c["round_ms_max"],
                                                          c["decide_ms_median"], c["decide_ms_max"]))
    print("\nWith the measured launch latency in the simulator (--start-latency: median wall seconds from sbatch to "
          "the job's start x time scale):")
    print("| policy | attempts launched | launch latency median / p90 (wall s) | --start-latency (s) | avg JCT live | "
          "simulated | diff | makespan diff |")
    print("|---|---|---|---|---|---|---|---|")
    for p, r in result["policies"].items():
        lat, lv, sm = r["launch_latency_wall_s"], r["live"], r["sim_latency"]
        print("| %s | %d | %.2f / %.2f | %.0f | %.0f | %.0f | %+.1f %% | %+.1f %% |" % (
            p, len(lat), statistics.median(lat) if lat else 0, lat[int(0.9 * (len(lat) - 1))] if lat else 0,
            r["start_latency_model_s"], lv["avg_jct"], sm["avg_jct"], 100 * (lv["avg_jct"] / sm["avg_jct"] - 1),
            100 * (lv["makespan"] / sm["makespan"] - 1)))
    if "crius" in result["policies"] and "fcfs" in result["policies"]:
        c, f = result["policies"]["crius"], result["policies"]["fcfs"]
        print("\nCrius's avg-JCT reduction over FCFS: live %.1f %%, simulated %.1f %%, simulated with the launch "
              "latency %.1f %%" % (100 * (1 - c["live"]["avg_jct"] / f["live"]["avg_jct"]),
                                   100 * (1 - c["sim"]["avg_jct"] / f["sim"]["avg_jct"]),
                                   100 * (1 - c["sim_latency"]["avg_jct"] / f["sim_latency"]["avg_jct"])))


if __name__ == "__main__":
    main()
