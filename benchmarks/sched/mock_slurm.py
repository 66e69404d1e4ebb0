#!/usr/bin/python3
"""A stand-in for Slurm's CLIs (sinfo, squeue, sbatch, scancel, by the name it is called as) over a JSON state file
($MOCK_SLURM_STATE), for measuring tessel-sched serve's round at a cluster size no test machine has. Jobs "run"
without processes: each ends after the wall seconds the state's duration range draws, and then reports itself done
in its progress.json, as tessel-sched-trainer would; a signalled job ends at once (checkpointed).
Used by controller_scale.py; not a test of Slurm (slurm_test.py runs the real one)."""

import fcntl
import json
import os
import random
import re
import sys
import time

STATE = os.environ["MOCK_SLURM_STATE"]
ALIVE = ("PENDING", "RUNNING")


def load(f):
    f.seek(0)
    return json.load(f)


def save(f, s):
    f.seek(0)
    f.truncate()
    json.dump(s, f)


def advance(s):
    now = time.time()
    running = {j["name"] for j in s["jobs"] if j["job_state"] == "RUNNING"}
    for j in s["jobs"]:
        if j["job_state"] == "PENDING" and not (j["singleton"] and j["name"] in running):
            running.add(j["name"])
            j["job_state"], j["start"] = "RUNNING", now
            j["end"] = now + random.uniform(*s["duration"])
        if j["job_state"] == "RUNNING" and now >= j["end"]:
            j["job_state"] = "COMPLETED"
            with open(os.path.join(j["dir"], "progress.json"), "w") as p:
                json.dump({"done": j["iterations"], "state": "done", "time": j["end"]}, p)


def main():
    cmd = os.path.basename(sys.argv[0])
    args = sys.argv[1:]
    with open(STATE, "r+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        s = load(f)
        advance(s)
        if cmd == "sinfo":
            print(json.dumps({"errors": [], "nodes": s["nodes"]}))
        elif cmd == "squeue":  # --me: every job here is the caller's
            print(json.dumps({"errors": [], "jobs": [
                {"job_id": j["job_id"], "name": j["name"], "comment": j["comment"], "job_state": j["job_state"],
                 "state_reason": "None",
                 "exit_code": 0, "restart_cnt": 0,
                 "job_resources": {"allocated_nodes": [{"nodename": n} for n in j["nodes"]]}} for j in s["jobs"]]}))
        elif cmd == "sbatch":
            opt = dict(a[2:].split("=", 1) for a in args if a.startswith("--") and "=" in a)
            # The batch script (the last argument) exports the plan and the job's folder, single-quoted.
            env = {}
            for line in open(args[-1]):
                m = re.match(r"export (TESSEL_SCHED_\w+)='(.*)'$", line.rstrip("\n"))
                if m:
                    env[m.group(1)] = m.group(2).replace("'\\''", "'")
            plan = json.load(open(env["TESSEL_SCHED_PLAN"]))
            s["next_id"] += 1
            s["jobs"].append({"job_id": s["next_id"], "name": opt["job-name"], "job_state": "PENDING",
                              "nodes": opt["nodelist"].split(","), "dir": env["TESSEL_SCHED_JOB_DIR"],
                              "iterations": plan["iterations"],
                              "comment": opt.get("comment", ""), "singleton": opt.get("dependency") == "singleton"})
            advance(s)
            print(s["next_id"])
        elif cmd == "scancel":
            job = int(args[-1])
            for j in s["jobs"]:
                if j["job_id"] == job and j["job_state"] in ALIVE:
                    j["job_state"] = "COMPLETED" if any(a.startswith("--signal") for a in args) else "CANCELLED"
        save(f, s)


if __name__ == "__main__":
    main()
