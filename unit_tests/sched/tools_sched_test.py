"""The sched tools as a hostile user meets them, without Slurm: traces in Unix epoch seconds, a job longer than any
fixed round limit, a cluster too large to track, option values without meaning, a damaged or planted status, a
state folder's journal that is a link. Real processes on real files (slurm_test.py covers the live controller).

    tools_sched_test.py WORK_DIR TESSEL_SCHED TESSEL_SCHED_DATA

Exits 0 when every check passed, 1 otherwise, listing every failed check.
"""

import csv
import json
import os
import shutil
import subprocess
import sys

WORK, SCHED, SCHED_DATA = sys.argv[1:4]
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)
failures = []
checks = 0


def run(*args, timeout=300):
    """(status, stdout, stderr) of a finished tool; a run past the timeout is a failed check, not a hang."""
    try:
        p = subprocess.run(list(args), capture_output=True, text=True, timeout=timeout, cwd=WORK)
        return p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired:
        return None, "", "did not finish within %d s" % timeout


def check(ok, what, detail=""):
    global checks
    checks += 1
    if not ok:
        failures.append(what + (": " + detail.strip()[-1500:] if detail else ""))


def refused(status, err, words, what, code=1):
    check(status == code and all(w in err for w in words),
          "%s (exit %s, expected %d and %s)" % (what, status, code, words), err)


def path(name):
    return os.path.join(WORK, name)


def write(name, text):
    with open(path(name), "w") as f:
        f.write(text)
    return path(name)


def simulate(trace, out, *extra):
    status, _, err = run(SCHED, "simulate", "--trace", trace, "--json", out, "--quiet", *extra)
    check(status == 0, "simulate " + os.path.basename(trace), err)
    return json.load(open(out)) if status == 0 else None


# A trace in Unix epoch seconds (as Slurm's accounting and the Helios traces write them) runs as the same trace from
# zero: the same decisions, the same JCTs.
status, _, err = run(SCHED_DATA, "synth", path("t.csv"), "--jobs", "40", "--seed", "3")
check(status == 0, "tessel-sched-data synth", err)
rows = list(csv.DictReader(open(path("t.csv"))))
EPOCH = 1591030000.0  # 2020-06-01
with open(path("epoch.csv"), "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
    w.writeheader()
    for r in rows:
        r = dict(r)
        r["submission_time"] = repr(float(r["submission_time"]) + EPOCH)
        if r.get("deadline") and float(r["deadline"]) >= 0:
            r["deadline"] = repr(float(r["deadline"]) + EPOCH)
        w.writerow(r)
zero = simulate(path("t.csv"), path("zero.json"), "--policy", "crius,fcfs")
epoch = simulate(path("epoch.csv"), path("epoch.json"), "--policy", "crius,fcfs")
if zero and epoch:
    for policy in ("crius", "fcfs"):
        a, b = zero["policies"][policy]["jobs"], epoch["policies"][policy]["jobs"]
        check(len(a) == len(b) == 40, "%s: 40 jobs in both runs" % policy, "%d / %d" % (len(a), len(b)))
        same = all(x["state"] == y["state"] and abs(x["jct"] - y["jct"]) < 1e-3 and x["num_gpus"] == y["num_gpus"] and
                   x["reschedules"] == y["reschedules"] for x, y in zip(a, b))
        check(same, "%s: the trace in epoch seconds gives the same jobs' outcomes as from zero" % policy)
        check(sum(x["state"] == "completed" for x in b) == 40, "%s: every job of the epoch trace completed" % policy)

# One job that needs more rounds than the old fixed limit (200,000). Until done, it completes and the run stops
# there; a round limit far beyond its end does not make the run go on.
HEADER = "job_id,submission_time,num_iteration,model_name,deadline,batch_size,num_gpu,gpu_type\n"
long_trace = write("long.csv", HEADER + "long,0,37500000,moe__690M,-1,256,1,a100\n")
done = simulate(long_trace, path("long.json"), "--policy", "fcfs", "--source", "estimator")
limited = simulate(long_trace, path("long3m.json"), "--policy", "fcfs", "--source", "estimator", "--rounds", "3000000")
if done and limited:
    d, l = done["policies"]["fcfs"], limited["policies"]["fcfs"]
    check(d["jobs"][0]["state"] == "completed", "the long job completes until done", json.dumps(d["jobs"][0]))
    check(d["end_reason"] == "every job ended", "the run says every job ended", d["end_reason"])
    check(l["end_reason"] == "every job ended" and len(l["round_time"]) == len(d["round_time"]),
          "--rounds 3000000 stops where the job ends", "%s, %d vs %d rounds" % (l["end_reason"], len(l["round_time"]),
                                                                              len(d["round_time"])))

# Nonsense in traces and clusters is refused naming file, row and field; a cluster too large to track names its size.
SIM = [SCHED, "simulate", "--policy", "fcfs", "--trace"]
status, _, err = run(*SIM, write("hex.csv", HEADER + "j1,0x10,10,moe__2.4B,-1,256,4,a40\n"))
refused(status, err, ["hex.csv:2", "submission_time", "'0x10'"], "a hexadecimal submission time")
status, _, err = run(*SIM, write("past.csv", HEADER + "j1,500,10,moe__2.4B,400,256,4,a40\n"))
refused(status, err, ["past.csv:2", "deadline 400 s is before the job's submission"],
        "a deadline before the submission")
huge = write("huge.csv", "gpu_type,num_nodes,gpus_per_node\n" +
             "".join("%s,1000000,1024\n" % t for t in ("a100", "v100", "a40", "a10")))
status, _, err = run(*SIM, path("t.csv"), "--cluster", huge)
refused(status, err, ["huge.csv", "a cluster of 4096000000 GPUs"], "a cluster of 4e9 GPUs")

# Option values whose derived quantities have no meaning are refused with the option's range.
status, _, err = run(SCHED, "serve", "--backend", "slurm", "--state", path("s"), "--round", "1e-300", timeout=30)
refused(status, err, ["--round"], "serve --round 1e-300", code=2)
check(not os.path.exists(path("s")), "nothing was made for a refused serve")

# status: a damaged status.json is an error naming it, one planted as a FIFO is refused, not waited on.
os.makedirs(path("state"))
write("state/status.json", '{"jobs": [{"state": "running"}]}')
status, _, err = run(SCHED, "status", "--state", path("state"), timeout=30)
refused(status, err, ["status.json", "'name'"], "a damaged status.json")
os.remove(path("state/status.json"))
os.mkfifo(path("state/status.json"))
status, _, err = run(SCHED, "status", "--state", path("state"), timeout=30)
refused(status, err, ["status.json", "FIFO"], "a status.json that is a FIFO")
os.remove(path("state/status.json"))
write("elsewhere", "secret")
os.symlink(path("elsewhere"), path("state/status.json"))
status, _, err = run(SCHED, "status", "--state", path("state"), timeout=30)
refused(status, err, ["status.json", "symbolic link"], "a status.json that is a link")

print("%d checks, %d failed" % (checks, len(failures)))
for f in failures:
    print("FAILED: " + f)
sys.exit(1 if failures else 0)
