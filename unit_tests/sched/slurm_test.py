"""sched's Slurm backend against a real Slurm started here: placement, shrink/move, node failure, controller
restart, Slurm unreachable, repeated failures and bad job specs, through the tools a user runs.

    slurm_test.py CASE WORK_DIR TESSEL_SCHED TRAINER PROFILE

CASE: placement, node_failure, restart, unreachable, repeated_failure, bad_input, hostile. PROFILE: Crius's profile tables
(the estimator alone when absent). Exits 0 when every check passed,
77 (skipped) when this machine cannot host a test cluster (not root, Slurm not installed, no network namespaces),
1 otherwise, listing every failed check.
"""

import json
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from slurm_local import LocalSlurm  # noqa: E402

SKIP = 77
CASE, WORK, SCHED, TRAINER, PROFILE = sys.argv[1:6]
WORK = os.path.abspath(WORK)
# Crius's profile tables when the data set is here, else the estimator alone.
PROFILE_ARGS = ["--profile", PROFILE] if os.path.isdir(PROFILE) else []
failures = []
checks = 0


def check(ok, what, detail=""):
    global checks
    checks += 1
    if not ok:
        failures.append(what + (": " + str(detail).strip()[-2500:] if detail else ""))
    return ok


def finish():
    print("%d checks, %d failed" % (checks, len(failures)))
    for f in failures:
        print("FAILED: " + f)
    sys.exit(1 if failures else 0)


class Serve:
    """tessel-sched serve as a user runs it, on a state folder."""

    def __init__(self, slurm, state, policy="crius", extra=(), path_first=None):
        self.slurm, self.state, self.policy, self.extra = slurm, state, policy, list(extra)
        self.path_first = path_first  # a folder searched before PATH (a slow sbatch)
        self.proc = None
        self.logs = []

    def start(self):
        log = open(os.path.join(WORK, "serve.%s.%d.log" % (os.path.basename(self.state), len(self.logs))), "w")
        self.logs.append(log.name)
        env = dict(self.slurm.env, PATH=os.path.dirname(TRAINER) + ":" + os.environ["PATH"])
        if self.path_first:
            env["PATH"] = self.path_first + ":" + env["PATH"]
        self.proc = subprocess.Popen([SCHED, "serve", "--backend", "slurm", "--state", self.state, "--partition",
                                      "main", "--policy", self.policy, "--round", "1", "--time-scale", "600",
                                      "--slurm-timeout", "10"] + PROFILE_ARGS + self.extra,
                                     stdout=log, stderr=subprocess.STDOUT, env=env, cwd=WORK)
        wait_for(lambda: os.path.exists(os.path.join(self.state, "status.json")), 30, "the controller's status")

    def kill(self, sig=signal.SIGKILL):
        self.proc.send_signal(sig)
        self.proc.wait(timeout=30)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.kill(signal.SIGTERM)

    def log(self):
        return "".join(open(p).read() for p in self.logs)

    def status(self):
        for _ in range(50):
            try:
                return json.load(open(os.path.join(self.state, "status.json")))
            except (ValueError, OSError):
                time.sleep(0.05)
        raise RuntimeError("status.json unreadable")

    def job(self, name):
        for j in self.status()["jobs"]:
            if j["name"] == name:
                return j
        return None


def wait_for(cond, timeout, what):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        v = cond()
        if v:
            return v
        time.sleep(0.2)
    raise TimeoutError("waited %d s for %s" % (timeout, what))


def submit(state, spec):
    p = subprocess.run([SCHED, "submit", "--state", state, "-"], input=json.dumps(spec), capture_output=True,
                       text=True, cwd=WORK)
    return p.returncode, p.stdout, p.stderr


def spec(name, model="moe__2.4B", gpus=4, gpu_type="a100", iterations=300, **extra):
    s = {"name": name, "model": model, "batch_size": 256, "iterations": iterations, "gpus": gpus,
         "gpu_type": gpu_type}
    s.update(extra)
    return s


def controller_id(state):
    return json.load(open(os.path.join(state, "config.json")))["controller_id"]


def slurm_jobs_of(slurm, name, state=None):
    """The Slurm jobs of the attempts of job `name` of the controller of `state` (named tessel.<id8>.<name>, its
    identity and the attempt in the comment tessel-sched:<id>:<attempt>)."""
    state = state or os.path.join(WORK, "state")
    ident = controller_id(state)
    return [j for j in slurm.jobs_json() if j["name"] == "tessel.%s.%s" % (ident[:8], name) and
            j["comment"].startswith("tessel-sched:%s:" % ident)]


def spans_of(slurm, state, name):
    """(start, end) of the attempts of job `name` that ran: Slurm gives an attempt cancelled while pending a start
    time too (the cancellation's), but only an attempt that ran has its output file."""
    out = []
    for j in slurm_jobs_of(slurm, name, state):
        attempt = j["comment"].rsplit(":", 1)[1]
        if os.path.exists(os.path.join(state, "jobs", name, "slurm.%s.out" % attempt)):
            out.append((j["start_time"], j["end_time"]))
    return sorted(out)


def alive(j):
    return j["job_state"] in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING")


def done(serve, names, timeout):
    def all_ended():
        s = serve.status()
        states = {j["name"]: j["state"] for j in s["jobs"]}
        return all(states.get(n) in ("completed", "rejected") for n in names)
    try:
        wait_for(all_ended, timeout, "jobs " + ", ".join(names) + " to end")
        return True
    except TimeoutError as e:
        check(False, str(e), json.dumps(serve.status()["jobs"], indent=1) + "\n" + serve.log()[-3000:])
        return False


# ---------------------------------------------------------------------------------------------------------------
def case_placement(slurm):
    """Each job gets its Cell's GRES type and count on the nodes the policy chose; Crius scales a lone job up and
    shrinks or moves it when a large job arrives, and its decisions equal the simulator's on the same trace."""
    state = os.path.join(WORK, "state")
    serve = Serve(slurm, state)
    serve.start()
    try:
        check(submit(state, spec("small", iterations=3000))[0] == 0, "submit small")
        wait_for(lambda: (serve.job("small") or {}).get("state") == "running", 30, "small to run")
        # Every running job's Slurm allocation is its Cell: the GRES type and count per node, on the Cell's nodes.
        def cells_match():
            for j in serve.status()["jobs"]:
                if j["state"] != "running":
                    continue
                sj = [x for x in slurm.jobs_json() if x["job_id"] == j["slurm_id"]]
                if not sj or sj[0]["job_state"] != "RUNNING":
                    return False
                nodes = [n["nodename"] for n in sj[0]["job_resources"]["allocated_nodes"]]
                want = "gres:gpu:%s:%d" % (j["cell"]["gpu_type"], j["cell"]["gpus_per_node"])
                check(sj[0]["tres_per_node"] == want and sorted(nodes) == sorted(j["cell"]["nodes"]),
                      "job %s: Slurm allocation %s on %s, Cell %s" % (j["name"], sj[0]["tres_per_node"], nodes,
                                                                         json.dumps(j["cell"])))
            return True
        wait_for(cells_match, 30, "the Slurm jobs to run")
        time.sleep(3)
        check(submit(state, spec("large", model="moe__10B", gpus=8, iterations=400))[0] == 0, "submit large")
        wait_for(lambda: (serve.job("large") or {}).get("state") == "running", 40, "large to run")
        wait_for(cells_match, 30, "the Slurm jobs to run after the large one arrived")
        if done(serve, ["small", "large"], 240):
            small = serve.job("small")
            check(small["reschedules"] >= 1, "crius moved or resized small at least once", json.dumps(small))
            # No two attempts of a job ran at once: each later attempt started after the previous one ended.
            for name in ("small", "large"):
                runs = spans_of(slurm, state, name)
                for (_, end), (start, _) in zip(runs, runs[1:]):
                    check(start >= end, "job %s: an attempt started before the previous one ended" % name, runs)
        log = serve.log()
        check("moved job small" in log, "the log shows small being moved", log[-2000:])
    finally:
        serve.stop()
    # The same trace in the simulator: the same decisions (reschedules, final Cells, order of completion).
    s = serve.status()
    compare_with_simulator(s, state)


def compare_with_simulator(status, state):
    rows = ["job_id,submission_time,num_iteration,model_name,deadline,batch_size,num_gpu,gpu_type"]
    journal = [json.loads(l) for l in open(os.path.join(state, "jobs.journal"))]
    config = json.load(open(os.path.join(state, "config.json")))
    t0 = config["t0"]
    interval = config["round_seconds"] * config["time_scale"]
    seen = {j["name"]: j["submit_round"] for j in status["jobs"]}
    for rec in journal:
        sp = rec["spec"]
        # The round the controller saw the job in, on the simulator's clock (its rounds start at the first job).
        rows.append("%s,%f,%d,%s,,%d,%d,%s" % (sp["name"], seen[sp["name"]] * interval,
                                               sp["iterations"], sp["model"], sp["batch_size"], sp["gpus"],
                                               sp["gpu_type"]))
    trace = os.path.join(WORK, "trace.csv")
    open(trace, "w").write("\n".join(rows) + "\n")
    cluster = os.path.join(WORK, "cluster.csv")
    groups = {}
    for n in config["nodes"]:
        groups.setdefault((n["gpu_type"], n["gpus"]), []).append(n["name"])
    open(cluster, "w").write("gpu_type,num_nodes,gpus_per_node\n" +
                             "".join("%s,%d,%d\n" % (t, len(v), g) for (t, g), v in groups.items()))
    out = os.path.join(WORK, "sim.json")
    p = subprocess.run([SCHED, "simulate", "--trace", trace, "--cluster", cluster] + PROFILE_ARGS + ["--policy",
                        config["policy"], "--interval", str(config["round_seconds"] * config["time_scale"]),
                        "--json", out, "--quiet"], capture_output=True, text=True, cwd=WORK)
    if not check(p.returncode == 0, "simulate the same trace", p.stderr):
        return
    sim = {j["id"]: j for j in json.load(open(out))["policies"][config["policy"]]["jobs"]}
    for j in status["jobs"]:
        if j["name"] in sim:
            print("job %s: JCT %.0f s live, %.0f s simulated" % (j["name"], j["finish_time"] - j["submit_time"],
                                                                  sim[j["name"]]["jct"]))
        sj = sim.get(j["name"])
        if not check(sj is not None, "simulated job " + j["name"]):
            continue
        check(sj["state"] == j["state"], "job %s: %s live, %s simulated" % (j["name"], j["state"], sj["state"]))
        check(sj["reschedules"] == j["reschedules"],
              "job %s: %d reschedules live, %d simulated" % (j["name"], j["reschedules"], sj["reschedules"]))
        last = j.get("last_cell", {})
        check(sj["gpu_type"] == last.get("gpu_type") and sj["num_gpus"] == last.get("gpus"),
              "job %s: last Cell %s live, %d %s simulated" % (j["name"], json.dumps(last), sj["num_gpus"],
                                                               sj["gpu_type"]))


def case_node_failure(slurm):
    """A node dies under a running job: the job is requeued and finishes elsewhere from its checkpoint."""
    state = os.path.join(WORK, "state")
    serve = Serve(slurm, state, policy="fcfs", extra=["--checkpoint", "600"])
    serve.start()
    try:
        check(submit(state, spec("victim", gpus=4, iterations=500))[0] == 0, "submit victim")
        j = wait_for(lambda: (lambda x: x if x and x["state"] == "running" and x["done"] > 100 else None)(
            serve.job("victim")), 60, "victim to progress")
        node = j["cell"]["nodes"][0]
        ckpt = wait_for(lambda: (lambda p: json.load(open(p)) if os.path.exists(p) else None)(
            os.path.join(state, "jobs", "victim", "checkpoint.json")), 30, "a checkpoint")
        slurm.crash_node(node)
        t_crash = time.monotonic()
        j2 = wait_for(lambda: (lambda x: x if x and x["state"] == "running" and x["attempt"] >= 2 else None)(
            serve.job("victim")), 90, "victim to restart")
        check(node not in j2["cell"]["nodes"], "victim restarted away from the dead node %s" % node, json.dumps(j2))
        check(j2["failures"] == 1, "one failure recorded", json.dumps(j2))
        if done(serve, ["victim"], 120):
            v = serve.job("victim")
            check(v["state"] == "completed", "victim completed", json.dumps(v))
            out = open(os.path.join(state, "jobs", "victim", "slurm.%d.out" % v["attempt"])).read()
            check(("%d of 500 iterations done" % ckpt["done"]) in out or "of 500 iterations done" in out and
                  " 0 of 500" not in out, "the restarted attempt resumed from the checkpoint", out)
        print("node %s crashed; victim restarted in %.1f s" % (node, time.monotonic() - t_crash))
        check("node %s is down" % node in serve.log() or "not usable" in serve.log(), "the log names the node",
              serve.log()[-2000:])
    finally:
        serve.stop()


def case_restart(slurm):
    """The controller is killed mid-round, twice, and restarted: no job lost, none started twice."""
    state = os.path.join(WORK, "state")
    # sbatch takes 0.8 s here, so that the first kill lands while a round is still submitting its jobs (after
    # some attempts were journaled and submitted, before others were).
    slow = os.path.join(WORK, "slow-sbatch")
    os.makedirs(slow, exist_ok=True)
    real = subprocess.run(["sh", "-c", "command -v sbatch"], capture_output=True, text=True).stdout.strip()
    with open(os.path.join(slow, "sbatch"), "w") as f:
        f.write("#!/bin/sh\nsleep 0.8\nexec %s \"$@\"\n" % real)
    os.chmod(os.path.join(slow, "sbatch"), 0o755)
    serve = Serve(slurm, state, path_first=slow)
    serve.start()
    names = ["r%d" % k for k in range(5)]
    try:
        for k, n in enumerate(names[:3]):
            check(submit(state, spec(n, gpus=2 << (k % 2), iterations=250 + 50 * k))[0] == 0, "submit " + n)
        wait_for(lambda: "started job" in serve.log(), 30, "the first start")
        serve.kill()
        launches = [json.loads(l) for l in open(os.path.join(state, "controller.journal")) if '"launch"' in l]
        started = serve.log().count("started job")
        print("killed after %d attempts journaled, %d known submitted" % (len(launches), started))
        check(len(launches) > started or len(launches) < 3, "the kill landed inside a round's launches",
              "%d journaled, %d started" % (len(launches), started))
        # Jobs submitted while no controller runs are not lost either.
        check(submit(state, spec(names[3], model="moe__1.3B", gpus=2, gpu_type="v100", iterations=200))[0] == 0,
              "submit while the controller is down")
        serve.start()
        time.sleep(3.7)
        serve.kill()
        check(submit(state, spec(names[4], gpus=4, iterations=150))[0] == 0, "submit " + names[4])
        serve.start()
        if done(serve, names, 240):
            for n in names:
                j = serve.job(n)
                check(j["state"] == "completed", "job %s completed" % n, json.dumps(j))
                runs = slurm_jobs_of(slurm, n)
                # Attempts never overlapped (Slurm's singleton dependency), and each attempt was submitted once.
                attempts = [r["comment"] for r in runs]
                check(len(attempts) == len(set(attempts)), "job %s: an attempt was submitted twice" % n, attempts)
                spans = spans_of(slurm, state, n)
                for (s0, e0), (s1, e1) in zip(spans, spans[1:]):
                    check(s1 >= e0, "job %s: two attempts ran at once" % n, spans)
            journal = [json.loads(l) for l in open(os.path.join(state, "controller.journal"))]
            ends = [r["job"] for r in journal if r["op"] == "end"]
            check(sorted(ends) == sorted(names), "each job ended once in the journal", ends)
        check("adopted job" in serve.log(), "the restarted controller adopted running jobs", serve.log()[-2000:])
    finally:
        serve.stop()


def case_unreachable(slurm):
    """slurmctld stops: the controller says so every round and keeps trying; when it is back, jobs finish."""
    state = os.path.join(WORK, "state")
    serve = Serve(slurm, state, policy="fcfs")
    serve.start()
    try:
        check(submit(state, spec("steady", gpus=4, iterations=300))[0] == 0, "submit")
        wait_for(lambda: (serve.job("steady") or {}).get("state") == "running", 30, "steady to run")
        slurm.stop_controller()
        wait_for(lambda: serve.status()["slurm_error"] != "", 60, "the status to show Slurm unreachable")
        # Each failed attempt is reported (an attempt lasts up to Slurm's MessageTimeout).
        try:
            wait_for(lambda: serve.log().count("Slurm not reachable") >= 3, 60, "three reports")
        except TimeoutError as e:
            check(False, str(e), serve.log()[-1500:])
        check(serve.proc.poll() is None, "the controller keeps running while Slurm is unreachable")
        p = subprocess.run([SCHED, "status", "--state", state], capture_output=True, text=True)
        check("Slurm not reachable" in p.stdout, "tessel-sched status shows it", p.stdout)
        slurm.start_controller()
        wait_for(lambda: serve.status()["slurm_error"] == "", 60, "the controller to reach Slurm again")
        if done(serve, ["steady"], 120):
            steady = serve.job("steady")
            check(steady["state"] == "completed" and steady["failures"] == 0,
                  "steady completed without a failure (its node never failed)", json.dumps(steady))
        check("Slurm reachable again" in serve.log(), "the log says Slurm is back", serve.log()[-1500:])
    finally:
        serve.stop()


def case_repeated_failure(slurm):
    """A job that fails at every attempt is rejected after --max-failures retries, with its last failure."""
    state = os.path.join(WORK, "state")
    serve = Serve(slurm, state, policy="fcfs", extra=["--max-failures", "2"])
    serve.start()
    try:
        check(submit(state, spec("flaky", gpus=2, command=TRAINER + " --fail-after 0.5"))[0] == 0, "submit flaky")
        check(submit(state, spec("fine", gpus=2, iterations=100))[0] == 0, "submit fine")
        if done(serve, ["flaky", "fine"], 120):
            f = serve.job("flaky")
            check(f["state"] == "rejected" and "failed 3 times" in f.get("reason", ""), "flaky rejected after 3",
                  json.dumps(f))
            check("exit code 3" in f.get("reason", ""), "the reason names the exit code", json.dumps(f))
            check(len(slurm_jobs_of(slurm, "flaky")) == 3, "flaky ran exactly 3 attempts",
                  [j["comment"] for j in slurm_jobs_of(slurm, "flaky")])
            check(serve.job("fine")["state"] == "completed", "the other job completed")
        time.sleep(3)
        check(len(slurm_jobs_of(slurm, "flaky")) == 3, "no attempt after the rejection")
    finally:
        serve.stop()


def case_bad_input(slurm):
    """Malformed, incomplete and impossible specs are refused at submit, naming the field; nothing is journaled."""
    state = os.path.join(WORK, "state")
    p = subprocess.run([SCHED, "submit", "--state", state, "-"], input="{}", capture_output=True, text=True)
    check(p.returncode == 1 and "no controller state" in p.stderr, "submit before any controller", p.stderr)
    serve = Serve(slurm, state)
    serve.start()
    try:
        cases = [
            ("{not json", "line 1"),
            (json.dumps([1, 2]), "a job spec is a JSON object"),
            (json.dumps({k: v for k, v in spec("x").items() if k != "iterations"}), "field 'iterations' is missing"),
            (json.dumps(spec("x", model="gpt__99B")), "field 'model': unknown model 'gpt__99B'"),
            (json.dumps(spec("x", gpu_type="h100")), "field 'gpu_type': the cluster has no 'h100' GPUs"),
            (json.dumps(spec("x", gpus=64)), "field 'gpus': 64 a100 GPUs requested; the cluster has 8"),
            (json.dumps(spec("x", gpus=3)), "field 'gpus': 3 is not a power of two"),
            (json.dumps(spec("x", iterations=-5)), "field 'iterations' must be in"),
            (json.dumps(spec("x", iterations="many")), "field 'iterations' must be an integer"),
            (json.dumps(spec("x", model="moe__70B", gpus=1)), "no feasible parallel plan on 1 a100"),
            (json.dumps(spec("x y")), "field 'name' may hold"),
            (json.dumps(dict(spec("x"), gpu="a100")), "field 'gpu' is not a job spec field"),
            (json.dumps(spec("x", deadline=-1)), "field 'deadline' must be a positive"),
        ]
        journal = os.path.join(state, "jobs.journal")
        for text, want in cases:
            p = subprocess.run([SCHED, "submit", "--state", state, "-"], input=text, capture_output=True, text=True)
            check(p.returncode == 1 and want in p.stderr and p.stderr.count("tessel-sched: error") == 1,
                  "submit %s: expected '%s'" % (text[:60], want), p.stderr)
        check(not os.path.exists(journal) or os.path.getsize(journal) == 0, "nothing journaled",
              open(journal).read() if os.path.exists(journal) else "")
        check(submit(state, spec("ok", iterations=50))[0] == 0, "a good spec is accepted")
        status, _, err = submit(state, spec("ok", iterations=50))
        check(status == 1 and "already submitted" in err, "a second job with the same name is refused", err)
        if done(serve, ["ok"], 60):
            check(serve.job("ok")["state"] == "completed", "ok completed")
    finally:
        serve.stop()


def case_hostile(slurm):
    """What jobs write, what lies in the state folder and what else runs under the same user: the controller keeps
    running, records each bad input against its job, and touches only its own attempts."""
    state = os.path.join(WORK, "state")
    serve = Serve(slurm, state, policy="fcfs", extra=["--max-failures", "0"])
    serve.start()
    outside = os.path.join(WORK, "outside")
    os.makedirs(outside, exist_ok=True)
    try:
        ident = controller_id(state)
        # Jobs of the same user that are not this controller's, one of them named as its attempts are: never touched.
        lookalikes = []
        for name in ("tessel.foreign", "tessel.%s.fine" % ident[:8]):
            p = subprocess.run(["sbatch", "--parsable", "--job-name=" + name, "--comment=attempt=1",
                                "--wrap=sleep 120"], capture_output=True, text=True, env=slurm.env)
            check(p.returncode == 0, "sbatch a look-alike job", p.stderr)
            lookalikes.append(int(p.stdout.strip().split(";")[0]))
        # A job folder replaced by a link elsewhere, and a status file that is a link: never written through.
        os.makedirs(os.path.join(state, "jobs"), exist_ok=True)
        os.symlink(outside, os.path.join(state, "jobs", "linked"))
        secret = os.path.join(outside, "secret")
        open(secret, "w").write("keep")
        os.remove(os.path.join(state, "status.json"))
        os.symlink(secret, os.path.join(state, "status.json"))
        # Progress and checkpoints that are lies or garbage; a command line with `cd` and `;`; a 200 KB command.
        trainer = os.path.basename(TRAINER)
        small = dict(model="moe__690M", gpus=1)  # feasible on one a100 GPU
        specs = [
            spec("poison", **small, command="""printf '{"done": "x"}' > progress.json; sleep 60"""),
            spec("negative", **small, command="""printf '{"done": -5, "state": "running"}' > progress.json; sleep 60"""),
            spec("corrupt", **small, command="printf garbage > checkpoint.json; exit 3"),
            spec("linked", **small, iterations=50),
            spec("cdjob", **small, iterations=100, command="mkdir -p sub && cd sub && " + trainer),
            spec("long", **small, iterations=100, command=": " + "x" * 200000 + "; " + trainer),
        ]
        for sp in specs:
            rc, _, err = submit(state, sp)
            check(rc == 0, "submit " + sp["name"], err)
        # What Slurm or the file system would refuse is refused at submit.
        rc, _, err = submit(state, spec("n" * 300))
        check(rc == 1 and "at most 128" in err, "a 300-character name refused at submit", err)
        rc, _, err = submit(state, spec("huge", command="x" * (3 << 19)))
        check(rc == 1 and "field 'command' has 1572864 bytes, at most 1048576" in err,
              "a 1.5 MiB command refused at submit", err)
        rc, _, err = submit(state, spec("huger", command="x" * (3 << 20)))
        check(rc == 1 and "standard input" in err and "more than the 2097152 bytes" in err,
              "a 3 MiB spec refused at submit, not read to its end", err)
        # A bad line and a record cut by a killed writer in the journal, then a submit: both jobs are read.
        with open(os.path.join(state, "jobs.journal"), "a") as f:
            f.write("this is not a record\n")
            f.write('{"op": "submit", "spec": {"name": "cut')
        rc, _, err = submit(state, spec("after_cut", **small, iterations=50))
        check(rc == 0, "a submit after a cut record", err)
        names = ["poison", "negative", "corrupt", "linked", "cdjob", "long", "after_cut"]
        if done(serve, names, 150):
            def reason(n):
                j = serve.job(n)
                return (j or {}).get("reason", "") + " / " + (j or {}).get("last_failure", "")
            check(serve.job("poison")["state"] == "rejected" and "field 'done' must be an integer" in reason("poison"),
                  "a progress report {done: x} is the job's failure", reason("poison"))
            check(serve.job("negative")["state"] == "rejected" and "got -5" in reason("negative"),
                  "done = -5 is not believed", reason("negative"))
            check("its checkpoint is unusable" in reason("corrupt"), "a corrupt checkpoint is named in the failure",
                  reason("corrupt"))
            check(serve.job("linked")["state"] == "rejected" and "symbolic link" in reason("linked"),
                  "a job folder that is a link is not written through", reason("linked"))
            for n in ("cdjob", "long", "after_cut"):
                check(serve.job(n)["state"] == "completed", "job %s completed" % n, json.dumps(serve.job(n)))
        check(serve.proc.poll() is None, "the controller kept running", serve.log()[-2000:])
        check(sorted(os.listdir(outside)) == ["secret"] and open(secret).read() == "keep",
              "nothing was written outside the state folder", os.listdir(outside))
        check(not os.path.islink(os.path.join(state, "status.json")), "status.json was replaced, not followed")
        check(serve.status()["input_errors"]["count"] >= 2, "the bad journal lines are reported",
              json.dumps(serve.status().get("input_errors")))
        # A second controller with its own state folder (a comma in its path) runs its job beside the first's and
        # cancels none of the first's, and the first none of its.
        state_b = os.path.join(WORK, "state,b")
        other = Serve(slurm, state_b, policy="fcfs")
        other.start()
        try:
            check(submit(state, spec("a_job", **small, iterations=400))[0] == 0, "submit to the first")
            check(submit(state_b, spec("b_job", **small, iterations=400))[0] == 0, "submit to the second")
            done(serve, ["a_job"], 90)
            done(other, ["b_job"], 90)
            for who, n in ((serve, "a_job"), (other, "b_job")):
                j = who.job(n) or {}
                check(j.get("state") == "completed" and j.get("failures") == 0,
                      "job %s completed, never cancelled" % n, json.dumps(j))
            check("stray" not in serve.log() + other.log(), "no controller took another's attempt for a stray",
                  serve.log()[-1500:] + other.log()[-1500:])
        finally:
            other.stop()
        alive_now = {j["job_id"]: j["job_state"] for j in slurm.jobs_json()}
        for jid in lookalikes:
            check(alive_now.get(jid) in ("RUNNING", "PENDING"), "the look-alike job %d was not touched" % jid,
                  alive_now.get(jid))
        # Bad lines in both journals do not keep the controller from starting again.
        serve.kill()
        with open(os.path.join(state, "controller.journal"), "a") as f:
            f.write('{"op": "launch", "job": "cdjob"}\n{"op": \n')
        serve.start()
        time.sleep(3)
        check(serve.proc.poll() is None and (serve.job("cdjob") or {}).get("state") == "completed",
              "the controller restarts over bad journal lines", serve.log()[-2000:])
        for jid in lookalikes:
            subprocess.run(["scancel", str(jid)], env=slurm.env)
    finally:
        serve.stop()


NODES = {
    "placement": [("a1", "a100", 4), ("a2", "a100", 4), ("v1", "v100", 4), ("v2", "v100", 4)],
    "node_failure": [("a1", "a100", 4), ("a2", "a100", 4)],
    "restart": [("a1", "a100", 4), ("a2", "a100", 4), ("v1", "v100", 4)],
    "unreachable": [("a1", "a100", 4)],
    "repeated_failure": [("a1", "a100", 4)],
    "bad_input": [("a1", "a100", 4), ("a2", "a100", 4)],
    "hostile": [("a1", "a100", 4), ("a2", "a100", 4)],
}

if __name__ == "__main__":
    why = LocalSlurm.unavailable()
    if why:
        print("skipped: " + why)
        sys.exit(SKIP)
    os.makedirs(WORK, exist_ok=True)
    for f in os.listdir(WORK):
        if f.startswith("serve."):
            os.remove(os.path.join(WORK, f))
    import shutil
    for d in ("state", "state,b", "outside"):
        shutil.rmtree(os.path.join(WORK, d), ignore_errors=True)
    # TESSEL_SLURM_TEST_INSTANCE (0-9): another bridge, subnet and ports, to run beside a cluster of instance 0.
    instance = int(os.environ.get("TESSEL_SLURM_TEST_INSTANCE", "0"))
    with LocalSlurm(os.path.join(WORK, "slurm"), NODES[CASE], instance=instance) as slurm:
        try:
            globals()["case_" + CASE](slurm)
        except Exception as e:  # a timeout or a crash of the harness is a failed check, with the logs
            check(False, "%s: %s" % (type(e).__name__, e), slurm.log("slurmctld")[-1500:])
    finish()
