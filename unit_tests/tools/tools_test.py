"""Tessel's tools as a user meets them: real processes, real files, real MPI jobs, real faults.

    tools_test.py CASE WORK_DIR NAME=PATH... [-- MPIEXEC [MPIEXEC_FLAGS...]]

CASE is one of: options, ranks, faults_2, faults_4, full_disk, moe_numbers, outputs, inputs, numbers, signals.
Exits 0 when every check passed, 77 (skipped) when the case cannot run here (no MPI, no permission to mount a
filesystem), 1 otherwise, listing every failed check.
"""

import os
import re
import shutil
import signal
import subprocess
import sys
import time

SKIP = 77
CASE, WORK = sys.argv[1], sys.argv[2]
_split = sys.argv.index("--") if "--" in sys.argv else len(sys.argv)
TOOLS = dict(a.split("=", 1) for a in sys.argv[3:_split])
MPIEXEC = sys.argv[_split + 1:]
os.makedirs(WORK, exist_ok=True)
failures = []
checks = 0


def tool(name):
    return TOOLS[name]


def run(argv, timeout=120, env=None, cwd=None):
    """(status, stdout, stderr, seconds) of a finished process."""
    e = dict(os.environ)
    # The MoE layer caches what it tunes on first use: here, in the work directory, not in the user's home.
    e.setdefault("TESSEL_CACHE_DIR", os.path.join(WORK, "cache"))
    e.update(env or {})
    t0 = time.monotonic()
    p = subprocess.run(argv, capture_output=True, text=True, errors="replace", timeout=timeout, env=e, cwd=cwd or WORK)
    return p.returncode, p.stdout, p.stderr, time.monotonic() - t0


def check(ok, what, detail=""):
    global checks
    checks += 1
    if not ok:
        failures.append(what + (": " + detail.strip()[-1500:] if detail else ""))


def for_people(stderr, what):
    """Error text has no crash, no source paths or internal names (those need --debug)."""
    check("terminate called" not in stderr and "Segmentation" not in stderr, what + ": crashed", stderr)
    check(not re.search(r"/\w+/[\w/.-]+\.(cpp|hpp|cu):\d+", stderr), what + ": source path in the message", stderr)
    check("tessel::" not in stderr, what + ": internal function name in the message", stderr)


def finish():
    print("%d checks, %d failed" % (checks, len(failures)))
    for f in failures:
        print("FAILED: " + f)
    sys.exit(1 if failures else 0)


# ---------------------------------------------------------------------------------------------------------------
# options: every numeric option of every tool, with huge, wrapping, negative, zero, malformed and non-finite values
# ---------------------------------------------------------------------------------------------------------------
BAD = ["99999999999999999999", "4294967299", "-1", "0", "abc", "1e400", "nan", "2.5x", "0x10"]

# (tool and arguments that make a valid run up to the option check, option, values of BAD that are valid)
MISSING = os.path.join(WORK, "missing.h5")
GNN_TRAIN = ["tessel-gnn", "train", "--data", MISSING]
GNN_BENCH = ["tessel-gnn-bench", "--data", MISSING]
GNN_BENCH_DIST = ["tessel-gnn-bench", "--backend", "dist", "--data", MISSING]
GNN_DATA = ["tessel-gnn-data", "sbm", "--out", "/nonexistent/x.h5", "--nodes", "100", "--community", "10"]
RMAT = ["tessel-gnn-data", "rmat", "--out", "/nonexistent/x.h5", "--scale", "4"]
CSV = ["tessel-gnn-data", "csv", "--out", "/nonexistent/x.h5", "--edges", MISSING]
MOE = ["tessel-moe", MISSING]
MOE_GEN = ["tessel-moe-gen", "--out", "/nonexistent/x.h5", "--scale", "256", "--tokens", "8"]
MOE_BENCH = ["tessel-moe-bench", "--models", "nosuch"]
MOE_TRAIN = ["tessel-moe", "train", "--json", "/nonexistent/dir/train.json"]
COMM = ["tessel-comm-bench", "-o", "nosuch"]
SIM = ["tessel-sched", "simulate", "--trace", MISSING, "--policy", "crius"]
CELLS = ["tessel-sched", "cells", "--model", "nosuch", "--gpu", "A100", "--cluster", MISSING, "--batch", "8", "--gpus",
         "4"]
SCHED_BENCH = ["tessel-sched-bench", "--cluster", MISSING]
SYNTH = ["tessel-sched-data", "synth", "/nonexistent/t.csv", "--cluster", MISSING]
EF = ["tessel-sched-data", "elasticflow-trace", MISSING, "/nonexistent/t.csv", "--cluster", MISSING]
SERVE = ["tessel-sched", "serve", "--backend", "slurm", "--state", "/nonexistent/state"]
TRAINER = ["tessel-sched-trainer"]
OPTIONS = [
    (GNN_TRAIN, "--epochs", []), (GNN_TRAIN, "--hidden", []), (GNN_TRAIN, "--layers", []),
    (GNN_TRAIN, "--lr", []), (GNN_TRAIN, "--weight-decay", ["0"]), (GNN_TRAIN, "--dropout", ["0"]),
    (GNN_TRAIN, "--patience", ["0"]), (GNN_TRAIN, "--seed", ["0", "4294967299"]),
    (GNN_TRAIN, "--random-features", ["0"]), (GNN_TRAIN + ["--checkpoint", "c.h5"], "--checkpoint-every", ["0"]),
    (GNN_TRAIN, "--part-size", []), (GNN_TRAIN, "--bandwidth", ["0"]), (GNN_TRAIN, "--latency", ["0"]),
    (GNN_BENCH, "--features", []), (GNN_BENCH, "--reps", []), (GNN_BENCH, "--warmup", ["0"]),
    (GNN_BENCH, "--part-size", []), (["tessel-gnn", "info", "--data", MISSING], "--part-size", []),
    (GNN_BENCH_DIST, "--bandwidth", ["0"]), (GNN_BENCH_DIST, "--latency", ["0"]),
    (GNN_DATA, "--nodes", []), (GNN_DATA, "--community", []), (GNN_DATA, "--p-in", []),
    (GNN_DATA, "--inter-degree", ["0"]), (GNN_DATA, "--classes", []), (GNN_DATA, "--features", ["0"]),
    (GNN_DATA, "--signal", ["0"]), (GNN_DATA, "--seed", ["0", "4294967299"]),
    (RMAT, "--scale", []), (RMAT, "--edge-factor", []), (RMAT, "--a", ["0"]), (RMAT, "--b", ["0"]),
    (RMAT, "--c", ["0"]), (RMAT, "--classes", []), (RMAT, "--features", ["0"]), (RMAT, "--seed", ["0", "4294967299"]),
    (CSV, "--split", []), (CSV, "--seed", ["0", "4294967299"]),
    (MOE, "--ep", ["0"]), (MOE, "--tp", []), (MOE, "--iters", []), (MOE, "--warmup", ["0"]), (MOE, "--chunks", []),
    (MOE, "--comm-share", []), (MOE, "--bandwidth", []), (MOE, "--latency", ["0"]), (MOE, "--timeout", []),
    (MOE_TRAIN, "--ep", []), (MOE_TRAIN, "--tp", []), (MOE_TRAIN, "--steps", []), (MOE_TRAIN, "--batch", []),
    (MOE_TRAIN, "--hidden", []), (MOE_TRAIN, "--ffn", []), (MOE_TRAIN, "--experts", []), (MOE_TRAIN, "--topk", []),
    (MOE_TRAIN, "--vocab", []), (MOE_TRAIN, "--outputs", []), (MOE_TRAIN, "--lr", []),
    (MOE_TRAIN, "--momentum", ["0"]), (MOE_TRAIN, "--aux-loss", ["0"]), (MOE_TRAIN, "--seed", ["0", "4294967299"]),
    (MOE, "--tune-budget", []),
    (MOE_GEN, "--scale", []), (MOE_GEN, "--tokens", []), (MOE_GEN, "--imbalance", ["0"]),
    (MOE_GEN, "--zipf-alpha", ["0"]), (MOE_GEN, "--seed", ["0", "4294967299"]), (MOE_GEN, "--nan-token", []),
    (MOE_BENCH, "--share", []), (MOE_BENCH, "--latency", ["0"]), (MOE_BENCH, "--tokens", []),
    (MOE_BENCH, "--scale", []), (MOE_BENCH, "--tp", []), (MOE_BENCH, "--imbalance", ["0"]),
    (MOE_BENCH, "--chunks", []), (MOE_BENCH, "--iters", []), (MOE_BENCH, "--warmup", ["0"]),
    (MOE_BENCH, "--seed", ["0", "4294967299"]),
    (COMM, "-b", ["4294967299"]), (COMM, "-e", ["4294967299"]), (COMM, "-f", []), (COMM, "-w", ["0"]), (COMM, "-n", []), (COMM, "-c", ["0"]),
    (SIM, "--rounds", ["0"]), (SIM, "--interval", []), (SIM, "--iteration-divisor", []),
    (SIM, "--seed", ["0", "4294967299"]), (SIM, "--node-mtbf", []), (SIM + ["--node-mtbf", "10"], "--repair-rounds", []),
    (SIM, "--job-mtbf", []), (SIM, "--start-latency", ["0"]), (SIM + ["--job-mtbf", "10"], "--checkpoint", []), (SIM, "--parallel", []),
    (CELLS, "--batch", []), (CELLS, "--gpus", []),
    (SCHED_BENCH, "--jobs", []), (SCHED_BENCH, "--rounds", []), (SCHED_BENCH, "--repeat", []),
    (SCHED_BENCH, "--seed", ["0", "4294967299"]), (SCHED_BENCH, "--load", []),
    (SYNTH, "--jobs", []), (SYNTH, "--rate", []), (SYNTH, "--median-hours", []), (SYNTH, "--sigma", ["0"]),
    (SYNTH, "--gpt-share", ["0"]), (SYNTH, "--seed", ["0", "4294967299"]),
    (EF, "--from", ["0"]), (EF, "--sample", []), (EF, "--seed", ["0", "4294967299"]),
    (SERVE, "--round", []), (SERVE, "--time-scale", []), (SERVE, "--max-failures", ["0"]),
    (SERVE, "--checkpoint", []), (SERVE, "--restart-cost", ["0"]), (SERVE, "--slurm-timeout", []),
    (SERVE, "--rounds", ["0"]), (TRAINER, "--fail-after", ["0"]),
]
# The base arguments may give the option under test (a required one): the last spelling wins.


def case_options():
    # Every numeric option in every tool's --help is covered by the table above.
    helps = {
        "tessel-gnn": [["--help"]], "tessel-gnn-bench": [["--help"]], "tessel-gnn-data": [["--help"]],
        "tessel-moe": [["--help"], ["train", "--help"]],
        "tessel-moe-gen": [["--help"]], "tessel-moe-bench": [["--help"]], "tessel-comm-bench": [["--help"]],
        "tessel-sched": [["simulate", "--help"], ["cells", "--help"], ["serve", "--help"], ["submit", "--help"],
                         ["status", "--help"]], "tessel-sched-bench": [["--help"]],
        "tessel-sched-trainer": [["--help"]],
        "tessel-sched-data": [["--help"]],
    }
    covered = {(argv[0], opt) for argv, opt, _ in OPTIONS}
    for name, invocations in helps.items():
        for args in invocations:
            status, out, err, _ = run([tool(name)] + args)
            check(status == 0, name + " " + " ".join(args) + ": exit status %d" % status, err)
            # The tool's own help, not Kokkos's option list (that is --kokkos-help).
            check(out.strip() != "" and "--kokkos-num-threads" not in out + err,
                  name + " " + " ".join(args) + ": prints its own help, without Kokkos's", out[:400])
            # "--name N", "--name H", "--name MB/s": an option followed by an upper-case placeholder of a number.
            for opt in re.findall(r"(--[a-z][a-z0-9-]*)[ =](?:N|H|S|R|D|T|E|C|X|F|B|US|SEC|MB/s|STD|A|SECONDS|"
                                  r"JOBS_PER_HOUR|R,C|LIST)\b", out):
                if opt in ("--trace", "--schedule", "--models", "--kernels", "--policy", "--profile", "--cluster",
                           "--registry", "--tuning", "--json", "--data", "--out", "--source", "--crius-spec", "--decisions",
                           "--device-infos"):
                    continue
                check((name, opt) in covered, "%s %s is not in the options table" % (name, opt))
    for base, opt, valid in OPTIONS:
        for value in BAD:
            if value in valid:
                continue
            argv = [tool(base[0])] + base[1:] + [opt, value]
            status, out, err, _ = run(argv)
            what = " ".join(base[:2]) + " " + opt + " " + value
            check(status == 2, what + ": exit status %d, expected 2 (usage)" % status, err)
            check(("option " + opt) in err or ("/" + opt.lstrip("-")) in err or opt in err,
                  what + ": the error does not name the option", err)
            check(err.count("error") == 1, what + ": expected one error line", err)
            for_people(err, what)
    # Conflicts and meaningless combinations are errors, not silently dropped.
    for argv, text in [
        (MOE + ["--no-emulation", "--bandwidth", "100"], "--no-emulation"),
        (MOE + ["--bandwidth", "100", "--comm-share", "0.3"], "give one of them"),
        (GNN_TRAIN + ["--resume"], "need --checkpoint"),
        (GNN_TRAIN + ["--kernel", "nosuch"], "option --kernel"),
        (GNN_TRAIN + ["--feature-format", "nosuch"], "option --feature-format"),
        (GNN_BENCH_DIST + ["--dist-partition", "nosuch"], "option --dist-partition"),
        (GNN_BENCH_DIST + ["--kernel", "nosuch"], "option --kernel"),
        (SIM + ["--repair-rounds", "3"], "needs --node-mtbf"),
        (SIM + ["--checkpoint", "600"], "needs --node-mtbf or --job-mtbf"),
        (SIM[:-1] + ["nosuch"], "option --policy"),
        (MOE_GEN + ["--imbalance", "0.1", "--zipf-alpha", "1"], "give one of them"),
        (["tessel-gnn", "nosuch"], "unknown command"), (["tessel-sched"], "no command"),
        (["tessel-gnn", "train", "--epochs", "5"], "--data"),
    ]:
        status, out, err, _ = run([tool(argv[0])] + argv[1:])
        check(status == 2 and text in err, " ".join(argv) + ": expected exit 2 naming '%s'" % text,
              "status %d: %s" % (status, err))
        for_people(err, " ".join(argv))
    # Kokkos's own options: a usage error from every tool, not an uncaught exception.
    for argv in (["tessel-gnn", "config", "--kokkos-threads=abc"], ["tessel-comm-bench", "--kokkos-num-threads=x"],
                 ["tessel-sched", "simulate", "--kokkos-num-threads=99999999999999"]):
        status, out, err, _ = run([tool(argv[0])] + argv[1:])
        check(status == 2 and "Kokkos option --kokkos-" in err and err.count("error") == 1,
              " ".join(argv) + ": expected exit 2", "status %d: %s" % (status, err))
        for_people(err, " ".join(argv))
    # Bad environment: a timeout that means nothing is refused, not replaced by 120 s.
    status, out, err, _ = run([tool("tessel-comm-bench"), "-b", "8", "-e", "8"], env={"TESSEL_COMM_TIMEOUT": "-3"})
    check(status == 2 and "TESSEL_COMM_TIMEOUT" in err, "TESSEL_COMM_TIMEOUT=-3: expected exit 2", err)
    # Developers' detail only on request.
    status, out, err, _ = run([tool("tessel-gnn"), "info", "--data", MISSING, "--debug"])
    check(status == 1 and "(raised in tessel::" in err, "--debug: expected the raising location", err)
    status, out, err, _ = run([tool("tessel-gnn"), "info", "--data", MISSING])
    check(status == 1 and "file not found" in err, "missing data: expected exit 1", err)
    for_people(err, "missing data")
    finish()


# ---------------------------------------------------------------------------------------------------------------
# MPI helpers
# ---------------------------------------------------------------------------------------------------------------
def mpi(n, argv):
    return MPIEXEC[:1] + ["-n", str(n)] + MPIEXEC[1:] + argv


def make_inputs():
    """A small MoE layer and a small graph, written by the generators."""
    layer = os.path.join(WORK, "layer.h5")
    graph = os.path.join(WORK, "graph.h5")
    if not os.path.exists(layer):
        status, _, err, _ = run([tool("tessel-moe-gen"), "--model", "mixtral", "--scale", "64", "--tokens", "256",
                                 "--out", layer])
        check(status == 0, "tessel-moe-gen", err)
    if not os.path.exists(graph):
        status, _, err, _ = run([tool("tessel-gnn-data"), "sbm", "--nodes", "2000", "--community", "50", "--out",
                                 graph])
        check(status == 0, "tessel-gnn-data", err)
    return layer, graph


def rank_pids(launcher, ranks, deadline=60):
    """pid of each rank the launcher started (found by the rank variable in their environment)."""
    found = {}
    end = time.monotonic() + deadline
    while time.monotonic() < end and len(found) < ranks:
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open("/proc/%s/environ" % pid, "rb") as f:
                    env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
                with open("/proc/%s/stat" % pid) as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError):
                continue
            rank = env.get(b"OMPI_COMM_WORLD_RANK")
            if rank is not None and descends(int(pid), launcher.pid):
                found[int(rank)] = int(pid)
        time.sleep(0.1)
    return found


def descends(pid, ancestor):
    while pid > 1:
        if pid == ancestor:
            return True
        try:
            with open("/proc/%d/stat" % pid) as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            return False
    return False


def fault(n, argv, sig, after, timeout_s, what, expect=None, finished=None):
    """Starts an n-rank job, sends \p sig to rank n-1 \p after seconds in, and checks that the whole job ends,
    non-zero, within the communication timeout plus 10 s, with an error. Returns False, checking nothing, when the
    fault came after the job's work: \p finished (the job's last line) is in its output, every other rank has exited
    and only the launcher still waits for the stopped one, which no rank can see."""
    env = dict(os.environ, TESSEL_COMM_TIMEOUT=str(timeout_s))
    env.setdefault("TESSEL_CACHE_DIR", os.path.join(WORK, "cache"))
    p = subprocess.Popen(mpi(n, argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                         cwd=WORK, start_new_session=True)
    pids = rank_pids(p, n)
    check(len(pids) == n, what + ": found %d of %d ranks" % (len(pids), n))
    time.sleep(after)
    victim = pids.get(n - 1)
    t0 = time.monotonic()
    if finished and p.poll() is not None:
        print("%s: the job had ended %.1f s after the ranks were found, before the fault" % (what, after))
        p.communicate()
        return False
    if victim and p.poll() is None:
        os.kill(victim, sig)
    try:
        out, err = p.communicate(timeout=timeout_s + 10)
        took = time.monotonic() - t0
        check(p.returncode != 0, what + ": the job exited 0", err)
        if expect:
            check(expect in err, what + ": expected '%s' in the error" % expect, err)
        err = without_launcher_crash(err, p.pid, what)
        for_people(err, what)
        print("%s: ended in %.1f s (timeout %d s), status %d" % (what, took, timeout_s, p.returncode))
    except subprocess.TimeoutExpired:
        stuck = where_stuck(pids, victim)
        others_gone = all(not os.path.exists("/proc/%d" % pid) for pid in pids.values() if pid != victim)
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        if finished and finished in out and others_gone:
            print("%s: the fault came %.1f s after the ranks were found, after the job's work was done (its output "
                  "ends with '%s')" % (what, after, out.strip().splitlines()[-1][:80] if out.strip() else ""))
            kill_all(pids)
            return False
        check(False, what + ": the job still runs %.0f s after the fault (timeout %d s)" % (timeout_s + 10,
                                                                                            timeout_s))
        print("%s: where the ranks wait, the fault plus %.0f s:\n%s" % (what, timeout_s + 10, stuck))
        print("%s: the job's output:\n%s\nits error output:\n%s" % (what, out.strip()[-1500:], err.strip()[-3000:]))
    kill_all(pids)
    return True


def kill_all(pids):
    """Nothing may be left behind."""
    for pid in pids.values():
        try:
            os.kill(pid, signal.SIGCONT)
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def where_stuck(pids, victim):
    """The main thread's stack of every rank still running but \p victim, when gdb is at hand: where a hung job
    waits."""
    gdb = shutil.which("gdb")
    if not gdb:
        return "(no gdb to show where the ranks wait)"
    stacks = []
    for rank, pid in sorted(pids.items()):
        try:
            with open("/proc/%d/stat" % pid) as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            state = "gone"
        stacks.append("rank %d (pid %d): state %s" % (rank, pid, state))
        if pid != victim and state not in ("gone", "Z"):
            out = subprocess.run([gdb, "-p", str(pid), "-batch", "-ex", "bt 25"], capture_output=True, text=True,
                                 timeout=60).stdout
            stacks.append("\n".join(l for l in out.splitlines() if l.startswith("#")))
    return "\n".join(stacks)


def without_launcher_crash(err, launcher, what):
    """\p err without the launcher's own crash report when the launcher (Open MPI 4.1's mpiexec, pid \p launcher)
    crashed in its PMIx server's finalize after it had ended the job: that is the launcher's fault, not a rank's,
    and is reported as a note. Any other crash report stays, for for_people to fail on."""
    tag = re.compile(r"^\[[^\]:]+:%d\] " % launcher)
    mine = [line for line in err.splitlines() if tag.match(line)]
    if mine and any("orte_finalize" in line or "PMIx_server_finalize" in line for line in mine):
        print("note: %s: mpiexec crashed in its own finalize after ending the job (%s)" %
              (what, next((l for l in mine if "Signal:" in l), mine[0]).split("] ", 1)[1]))
        return "\n".join(line for line in err.splitlines() if not tag.match(line))
    return err


def case_faults(n):
    if not MPIEXEC:
        sys.exit(SKIP)
    layer, graph = make_inputs()
    t = 5
    comm = [tool("tessel-comm-bench"), "-b", "8", "-e", "8", "-n", "1000000", "-w", "0"]
    moe = [tool("tessel-moe"), layer, "--bandwidth", "20", "--iters", "100000", "--schedule", "comet,pipelined"]
    def gnn(epochs):
        return [tool("tessel-gnn"), "train", "--data", graph, "--epochs", str(epochs), "--patience", "0", "--quiet",
                "--kernel", "csr"]
    # gnn training is distributed over the ranks (DistSpmm's halo messages and the gradients' all-reduce every
    # epoch), so a stopped rank is noticed within the communication timeout. The job must not have finished when the
    # fault comes (1.5 s after the ranks were found): a rank stopped after its last exchange leaves the launcher
    # waiting for it with the job's work done, which no rank can see. The job runs as many epochs as take about 12 s
    # of wall time on this build; the faults 1.5 s in land in its training or, on a slow start, in its start-up
    # (covered as well below). A job of about 4 s was too short: finding the ranks in /proc took part of it.
    epochs = 600
    status, out, err, alone = run(mpi(n, gnn(epochs)), timeout=600, env={"TESSEL_COMM_TIMEOUT": str(t)})
    if status == 0 and alone < 12:
        epochs = int(epochs * min(200, 12 / max(alone, 0.05)))
        status, out, err, alone = run(mpi(n, gnn(epochs)), timeout=600, env={"TESSEL_COMM_TIMEOUT": str(t)})
    check(status == 0, "gnn training, %d ranks, %d epochs, no fault: exit status %d" % (n, epochs, status), err)
    print("gnn training, %d ranks, no fault: %d epochs in %.1f s" % (n, epochs, alone))
    gnn = gnn(epochs)
    for what, argv, after, expect in [("collectives", comm, 2, "did not complete within"),
                                      ("moe schedules", moe, 4, "did not complete within"),
                                      ("gnn training", gnn, 1.5, "within")]:
        # A fault that came after the gnn job's work tested nothing: it is tried again, sooner.
        landed = False
        for tries, when in enumerate([after, after / 2, 0.2]):
            landed = fault(n, argv, signal.SIGSTOP, when, t, "%s, %d ranks, rank %d stopped" % (what, n, n - 1),
                           expect, finished="finished after")
            if landed:
                break
        check(landed, "%s, %d ranks, rank %d stopped: every fault came after the job's end" % (what, n, n - 1))
        fault(n, argv, signal.SIGKILL, after, t, "%s, %d ranks, rank %d killed" % (what, n, n - 1))
    # A rank stopped as soon as it exists, most often inside MPI_Init (whose fence has no timeout of its own), and
    # one stopped a little later, often past MPI_Init in Kokkos's start-up, before the tool's communicators exist
    # (MPI_Comm_dup, which waits for every rank with no timeout of its own, hung the others there).
    for after in [0, 0.5]:
        fault(n, comm, signal.SIGSTOP, after, t, "start-up, %d ranks, rank %d stopped %.1f s in" % (n, n - 1, after))
    finish()


def case_ranks():
    if not MPIEXEC:
        sys.exit(SKIP)
    layer, graph = make_inputs()
    # Different options on the ranks: one clear error, printed once.
    argv = MPIEXEC[:1] + MPIEXEC[1:] + ["-n", "1", tool("tessel-moe"), layer, "--iters", "2", ":", "-n", "1",
                                        tool("tessel-moe"), layer, "--iters", "3"]
    status, out, err, _ = run(argv)
    check(status == 2 and err.count("same command line") == 1, "different options: one usage error", err)
    for_people(err, "different options")
    # The same path holding different data on the ranks (same shape, other values).
    for d, seed in (("r0", "1"), ("r1", "2")):
        os.makedirs(os.path.join(WORK, d), exist_ok=True)
        status, _, err, _ = run([tool("tessel-moe-gen"), "--model", "mixtral", "--scale", "64", "--tokens", "64",
                                 "--seed", seed, "--out", os.path.join(WORK, d, "l.h5")])
        check(status == 0, "tessel-moe-gen", err)
    argv = MPIEXEC[:1] + MPIEXEC[1:] + ["-n", "1", "--wdir", os.path.join(WORK, "r0"), tool("tessel-moe"), "l.h5",
                                        ":", "-n", "1", "--wdir", os.path.join(WORK, "r1"), tool("tessel-moe"), "l.h5"]
    status, out, err, _ = run(argv)
    check(status == 1 and err.count("differs across ranks") == 1, "different data: one error", err)
    # An error every rank hits is printed once, without rank prefixes.
    # (Only the tool's lines count: an OpenMP Kokkos warns on every rank that 4 ranks oversubscribe 2 cores.)
    status, out, err, _ = run(mpi(4, [tool("tessel-comm-bench"), "-n", "abc"]))
    mine = "\n".join(line for line in err.splitlines() if line.startswith("tessel-"))
    check(status == 2 and mine.count("error") == 1 and "rank" not in mine, "same error on 4 ranks: printed once", err)
    # An error only some ranks hit names them.
    status, out, err, _ = run(mpi(2, [tool("tessel-gnn"), "train", "--data", os.path.join(WORK, "r0", "l.h5")]))
    check(status == 1 and "error" in err, "a wrong file on both ranks", err)
    finish()


# ---------------------------------------------------------------------------------------------------------------
# full_disk: every writer on a full filesystem, a read-only one, and /dev/full
# ---------------------------------------------------------------------------------------------------------------
def fill(directory, leave=0):
    """Fills the filesystem of \p directory, leaving about \p leave bytes free (0: none at all)."""
    st = os.statvfs(directory)
    room = max(0, st.f_bavail * st.f_frsize - leave)
    try:
        with open(os.path.join(directory, "filler"), "wb") as f:
            while room > 0 or leave == 0:
                n = min(room, 1 << 20) if leave else 4096
                f.write(b"\0" * n)
                f.flush()
                room -= n
    except OSError:
        pass


def no_leftovers(directory, keep, what):
    left = sorted(set(os.listdir(directory)) - set(keep) - {"filler"})
    check(not left, what + ": files left behind: " + ", ".join(left))


def sched_inputs():
    """Small inputs of the sched data converters: a Crius trace, an ElasticFlow trace, a Crius cluster spec."""
    crius = os.path.join(WORK, "crius.csv")
    with open(crius, "w") as f:
        f.write("job_id,submission_time,num_iteration,model_name,deadline,batch_size,num_gpu,gpu_type\n")
        for j in range(400):
            f.write("j%d,%d,%d,bert__1.3B,-1,128,%d,a100\n" % (j, 60 * j, 1000 + j, 1 << (j % 3)))
    elastic = os.path.join(WORK, "elastic.csv")
    with open(elastic, "w") as f:
        f.write("job_id,submission_time,num_iteration,model_name,deadline,batch_size,num_gpu,duration\n")
        for j in range(400):
            f.write("e%d,%d,%d,resnet50,%d,128,%d,600\n" % (j, 60 * j, 1000 + j, 60 * j + 7200, 1 << (j % 3)))
    spec = os.path.join(WORK, "spec.json")
    with open(spec, "w") as f:
        f.write('[{"a100": {"node_num": 4}, "v100": {"node_num": 2}}]\n')
    return crius, elastic, spec


def case_full_disk():
    layer, graph = make_inputs()
    trace = os.path.join(WORK, "trace.csv")
    status, _, err, _ = run([tool("tessel-sched-data"), "synth", trace, "--jobs", "30"])
    check(status == 0, "tessel-sched-data synth", err)
    crius, elastic, spec = sched_inputs()
    sim = [tool("tessel-sched"), "simulate", "--trace", trace, "--policy", "fcfs", "--quiet"]
    gnn = [tool("tessel-gnn"), "train", "--data", graph, "--epochs", "3", "--quiet", "--kernel", "csr"]
    data_dir = os.environ.get("TESSEL_DATA_DIR", "")
    profile = os.path.join(data_dir, "traces", "crius")
    writers = [  # (what, argv writing to PATH, file name)
        ("gnn-data HDF5", [tool("tessel-gnn-data"), "sbm", "--nodes", "3000", "--out", "PATH"], "g.h5"),
        ("gnn-data rmat HDF5", [tool("tessel-gnn-data"), "rmat", "--scale", "11", "--out", "PATH"], "r.h5"),
        ("gnn-data csv HDF5", [tool("tessel-gnn-data"), "csv", "--edges", os.path.join(WORK, "edges.csv"), "--out",
                               "PATH"], "c.h5"),
        ("moe-gen HDF5", [tool("tessel-moe-gen"), "--model", "mixtral", "--scale", "32", "--tokens", "512", "--out",
                          "PATH"], "l.h5"),
        ("sched-data CSV", [tool("tessel-sched-data"), "synth", "PATH", "--jobs", "1000"], "t.csv"),
        ("sched-data HDF5", [tool("tessel-sched-data"), "synth", "PATH", "--jobs", "1000"], "t.h5"),
        ("sched-data crius-trace HDF5", [tool("tessel-sched-data"), "crius-trace", crius, "PATH"], "ct.h5"),
        ("sched-data elasticflow-trace HDF5", [tool("tessel-sched-data"), "elasticflow-trace", elastic, "PATH"],
         "ef.h5"),
        ("sched-data cluster HDF5", [tool("tessel-sched-data"), "cluster", "--crius-spec", spec, "PATH"], "cl.h5"),
        ("sched JSON", sim + ["--json", "PATH"], "s.json"),
        ("gnn JSON", gnn + ["--json", "PATH"], "g.json"),
        ("gnn checkpoint", gnn + ["--checkpoint", "PATH"], "ck.h5"),
        # The adaptive kernel writes its plans beside the checkpoint (CK.plan.h5, CK.plan_t.h5).
        ("gnn checkpoint and plans", [tool("tessel-gnn"), "train", "--data", graph, "--epochs", "3", "--quiet",
                                      "--checkpoint", "PATH"], "cka.h5"),
        ("moe JSON", [tool("tessel-moe"), layer, "--no-emulation", "--iters", "1", "--json", "PATH"], "m.json"),
        # Enough steps for the loss to fall beyond its noise (else the run fails on its own).
        ("moe train JSON", [tool("tessel-moe"), "train", "--steps", "20", "--schedule", "sequential", "--batch", "32",
                            "--json", "PATH"], "tr.json"),
        ("moe train problem HDF5", [tool("tessel-moe"), "train", "--steps", "20", "--schedule", "sequential", "--batch",
                                    "512", "--problem", "PATH"], "pr.h5"),
        ("comm JSON", [tool("tessel-comm-bench"), "-b", "8", "-e", "8", "-J", "PATH"], "c.json"),
    ]
    if os.path.isdir(profile):
        writers.append(("sched-data profile HDF5", [tool("tessel-sched-data"), "profile", profile, "PATH"], "p.h5"))
    else:
        print("no Crius profile tables in TESSEL_DATA_DIR: sched-data profile is not written on a full disk")
    if MPIEXEC:
        # The 2-rank checkpoint: rank 0 writes it, both ranks end through the job's report.
        writers.append(("gnn checkpoint, 2 ranks", mpi(2, gnn + ["--checkpoint", "PATH"]), "ck2.h5"))
    with open(os.path.join(WORK, "edges.csv"), "w") as f:
        f.write("a,b\n" + "".join("%d,%d\n" % (i, (i * 7 + 1) % 5000) for i in range(5000)))
    # /dev/full: needs no privileges.
    for what, argv, name in writers:
        if name.endswith(".h5") or name.endswith(".csv"):
            continue
        status, out, err, _ = run([a.replace("PATH", "/dev/full") for a in argv])
        check(status == 1 and "cannot write '/dev/full'" in err and "written" not in out,
              what + " to /dev/full: expected a write error", "status %d: %s %s" % (status, out[-300:], err))
        for_people(err, what + " to /dev/full")
    # A file size limit (ulimit -f) below what a writer writes: a write error naming the file, as on a full disk, not
    # a SIGXFSZ that ends the tool with its temporary left behind.
    import resource

    def limit_file_size():
        resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 10, resource.RLIM_INFINITY))

    limited = os.path.join(WORK, "limited")
    os.makedirs(limited, exist_ok=True)
    for what, argv, name in writers:
        if MPIEXEC and argv[0] == MPIEXEC[0]:
            continue  # under mpiexec: the launcher's own files need more than the limit
        for f in os.listdir(limited):
            os.remove(os.path.join(limited, f))
        target = os.path.join(limited, name)
        e = dict(os.environ, TESSEL_CACHE_DIR=os.path.join(WORK, "cache"))
        p = subprocess.run([a.replace("PATH", target) for a in argv], capture_output=True, text=True,
                           errors="replace", timeout=300, env=e, cwd=WORK, preexec_fn=limit_file_size)
        where = "%s beyond a file size limit of 64 KiB" % what
        if p.returncode == 0:
            # It fitted: the file is complete (the tool read it back) and nothing else is left.
            check(os.path.getsize(target) <= 64 << 10, where + ": a file larger than the limit was written")
            no_leftovers(limited, [name, name + ".plan.h5", name + ".plan_t.h5"], where)
            continue
        check(p.returncode == 1, where + ": exit status %d, expected 1" % p.returncode, p.stdout[-300:] + p.stderr)
        check("cannot write '%s" % target in p.stderr, where + ": the error names the file", p.stderr)
        no_leftovers(limited, [name + ".plan.h5", name + ".plan_t.h5"], where)  # complete plans of the checkpoint
        check(not os.path.exists(target), where + ": a partial file was left in place")
        for_people(p.stderr, where)
    # A missing directory fails before any work.
    status, out, err, _ = run(sim + ["--json", "/nonexistent/dir/s.json"])
    check(status == 1 and "cannot write '/nonexistent/dir/s.json'" in err and "metric" not in out,
          "JSON into a missing directory: expected an error before the simulation", err)
    mnt = os.path.join(WORK, "small-fs")
    os.makedirs(mnt, exist_ok=True)
    subprocess.run(["umount", mnt], capture_output=True)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", mnt], capture_output=True).returncode != 0:
        print("cannot mount a tmpfs here (needs root and CAP_SYS_ADMIN): the full-filesystem checks are skipped")
        finish() if failures else sys.exit(SKIP)
    try:
        for what, argv, name in writers:
            target = os.path.join(mnt, name)
            beside = [name, name + ".plan.h5", name + ".plan_t.h5"]  # the checkpoint's plans
            # A good file first (while there is room), then a full disk: the write fails and the good file stays.
            # HDF5 files also on a disk with a little room left, where HDF5's own writes, flush or close fail (the
            # case that crashed at exit): every run ends with exit status 0 or 1, through process exit.
            levels = [0, 16 << 10, 128 << 10] if name.endswith(".h5") else [0]
            for leave in levels:
                for f in os.listdir(mnt):
                    os.remove(os.path.join(mnt, f))
                small = [a.replace("PATH", target) for a in argv]
                small = [("300" if a in ("3000", "1000") else "64" if a in ("512", "32") else a) for a in small]
                status, out, err, _ = run(small)
                check(status == 0 and os.path.exists(target), what + ": the small write failed", err)
                before = {f: open(os.path.join(mnt, f), "rb").read() for f in os.listdir(mnt)}
                fill(mnt, leave)
                status, out, err, seconds = run([a.replace("PATH", target) for a in argv])
                where = "%s on a full disk (%d KiB left)" % (what, leave >> 10)
                if leave and status == 0:
                    # It fitted: the new file is complete (the tool read it back) and nothing else is left.
                    no_leftovers(mnt, beside, where)
                    continue
                check(status == 1, where + ": exit status %d, expected 1" % status, out[-500:] + err)
                check("cannot write '%s" % target in err, where + ": the error names the file", err)
                check("written" not in out.split("cannot write")[0][-200:] or status != 0, where + ": reported as "
                      "written", out)
                after = {f: open(os.path.join(mnt, f), "rb").read() for f in os.listdir(mnt) if f != "filler"}
                check(after.get(name) == before.get(name), where + ": the good file was changed or removed")
                no_leftovers(mnt, beside, where)
                for_people(without_launcher_crash(err, -1, where), where)
        # A read-only filesystem.
        for f in os.listdir(mnt):
            os.remove(os.path.join(mnt, f))
        subprocess.run(["mount", "-o", "remount,ro", mnt], check=True)
        status, out, err, _ = run(sim + ["--json", os.path.join(mnt, "s.json")])
        check(status == 1 and "Read-only file system" in err, "JSON on a read-only filesystem", err)
    finally:
        subprocess.run(["umount", mnt], capture_output=True)
    finish()


# ---------------------------------------------------------------------------------------------------------------
# moe_numbers: the MoE tools given numbers that would silently become other behaviour, success checks that could not
# fail, values that a lenient reader takes as something else (2 ranks)
# ---------------------------------------------------------------------------------------------------------------
def run_bounded(argv, timeout, env=None):
    """run(), with a process that outlives \p timeout reported as status "timeout" (a hang is a failure, not a
    crash of this script)."""
    try:
        return run(argv, timeout=timeout, env=env)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        return "timeout", out, err, timeout


def usage_error(argv, names, what, timeout=60):
    """\p argv ends at once with a usage error (exit 2) whose text holds every string of \p names."""
    status, out, err, seconds = run_bounded(argv, timeout)
    check(status == 2 and all(n in err for n in names),
          what + ": expected exit 2 naming %s, got status %s after %.0f s" % (names, status, seconds), err + out[-500:])
    for_people(err, what)


def case_moe_numbers():
    if not MPIEXEC:
        sys.exit(SKIP)
    layer, _ = make_inputs()
    moe = lambda *a: mpi(2, [tool("tessel-moe"), layer] + list(a))
    train = lambda *a: mpi(2, [tool("tessel-moe"), "train"] + list(a))
    bench = lambda *a: mpi(2, [tool("tessel-moe-bench"), "--models", "mixtral", "--tokens", "64", "--scale", "64",
                               "--iters", "1"] + list(a))
    # A link so slow that no message arrives within the timeout (1e-300 MB/s once overflowed a duration and switched
    # the emulated link off, printing "0.0 MB/s"): refused, naming the link and the timeout.
    for bandwidth in ("1e-300", "1e-9"):
        usage_error(moe("--bandwidth", bandwidth, "--iters", "1"), ["--bandwidth", "communication timeout"],
                    "tessel-moe --bandwidth " + bandwidth)
    usage_error(moe("--latency", "1e7", "--timeout", "5"), ["--latency", "communication timeout of 5 s"],
                "tessel-moe --latency beyond the timeout")
    # A share whose calibration would measure communication a million times the computation: refused at once.
    usage_error(moe("--comm-share", "0.999999"), ["--comm-share", "(0, 0.95]"], "tessel-moe --comm-share 0.999999")
    usage_error(bench("--share", "0.999999"), ["--share", "(0, 0.95]"], "tessel-moe-bench --share 0.999999")
    # A model this machine cannot hold: refused before allocating, naming the size (it crashed in the weights'
    # initialisation).
    usage_error(train("--hidden", "65536", "--ffn", "1048576"), ["GiB", "--hidden"], "tessel-moe train, huge model")
    usage_error(train("--vocab", "16777216", "--hidden", "65536"), ["GiB", "--vocab"], "tessel-moe train, huge vocab")
    # Options that would do nothing, or measure nothing.
    usage_error(train("--steps", "0"), ["--steps"], "tessel-moe train --steps 0")
    usage_error(train("--momentum", "0.9"), ["--momentum", "Adam"], "tessel-moe train --momentum with Adam")
    usage_error(moe("--schedule", "comet,comet"), ["--schedule", "twice"], "tessel-moe --schedule comet,comet")
    usage_error(train("--schedule", "sequential,sequential"), ["--schedule", "twice"], "train --schedule twice")
    usage_error(bench("--models", "mixtral,mixtral-8x7b"), ["--models", "twice"], "tessel-moe-bench --models twice")
    usage_error(bench("--tokens", "64,64"), ["--tokens", "twice"], "tessel-moe-bench --tokens twice")
    # A success check that can fail: a learning rate that changes no parameter learns nothing (the last batch's loss
    # below the first's, batch noise, was taken for learning), and a diverging one is named as such.
    status, out, err, _ = run_bounded(train("--lr", "1e-300", "--steps", "10", "--schedule", "sequential"), 300)
    check(status == 1 and "did not fall by more than its noise" in out,
          "tessel-moe train --lr 1e-300: expected exit 1, the loss did not fall (status %s)" % status, out + err)
    status, out, err, _ = run_bounded(train("--steps", "20", "--schedule", "sequential"), 300)
    check(status == 0 and "did not fall" not in out, "tessel-moe train --steps 20: expected it to learn", out + err)
    status, out, err, _ = run_bounded(train("--steps", "10", "--schedule", "sequential", "--lr", "0.05"), 300)
    check(status == 1 and "held-out loss rose" in out, "tessel-moe train --lr 0.05: expected the rise named",
          out + err)
    status, out, err, _ = run_bounded(train("--optimizer", "sgd", "--lr", "1e6", "--schedule", "sequential"), 300)
    check(status == 1 and "diverged at step" in err and "learning rate" in err,
          "tessel-moe train --lr 1e6: expected the divergence named (status %s)" % status, err)
    for_people(err, "tessel-moe train --lr 1e6")
    # --warmup 0: the first comet forward decides the parameters (cache or tuning on first use) before any timed run;
    # tuning inside comet's first timed run gave "hidden -59738%".
    cache = os.path.join(WORK, "fresh-cache")
    shutil.rmtree(cache, ignore_errors=True)
    result = os.path.join(WORK, "warmup0.json")
    status, out, err, _ = run_bounded(moe("--warmup", "0", "--iters", "1", "--schedule", "sequential,comet",
                                          "--bandwidth", "50", "--tune-budget", "1", "--json", result), 300,
                                      env={"TESSEL_CACHE_DIR": cache, "TESSEL_MOE_TUNE": "on"})
    check(status == 0, "tessel-moe --warmup 0: exit status %s" % status, err)
    if status == 0:
        import json
        doc = json.load(open(result))
        tuning, comet = doc["first_use_tuning_s"], doc["schedules"]["comet"]["runs_s"][0]
        check(tuning is not None and comet < 0.5 * tuning,
              "tessel-moe --warmup 0: comet's timed run (%.3f s) holds the first-use tuning (%s s)" % (comet, tuning))


def reader_inputs():
    """An input of each kind the tools read: a layer, a graph, a synthetic trace, the Crius and ElasticFlow traces, a
    job spec and an edge list."""
    layer, graph = make_inputs()
    trace = os.path.join(WORK, "trace.csv")
    status, _, err, _ = run([tool("tessel-sched-data"), "synth", trace, "--jobs", "30"])
    check(status == 0, "tessel-sched-data synth", err)
    crius, elastic, spec = sched_inputs()
    edges = os.path.join(WORK, "edges.csv")
    with open(edges, "w") as f:
        f.write("a,b\n0,1\n1,2\n2,0\n")
    return layer, graph, trace, crius, elastic, spec, edges


# outputs: an output that is an input (the same path, a symbolic or a hard link to it) or another output is
# refused before any work, naming both options, and the input is left as it was
# ---------------------------------------------------------------------------------------------------------------
def case_outputs():
    layer, graph, trace, crius, elastic, spec, edges = reader_inputs()
    targets = os.path.join(WORK, "targets.csv")
    with open(targets, "w") as f:
        f.write("id,target\n0,x\n1,y\n2,x\n")
    profile = os.path.join(WORK, "profile")
    os.makedirs(profile, exist_ok=True)
    with open(os.path.join(profile, "dp_mem.json"), "w") as f:
        f.write("[{}]\n")
    gnn = [tool("tessel-gnn"), "train", "--data", graph, "--epochs", "1", "--quiet", "--kernel", "csr"]
    sim = [tool("tessel-sched"), "simulate", "--trace", trace, "--policy", "fcfs", "--quiet"]
    cases = [  # (what, argv with IN standing for the input and OUT for the output, input, input option, output option)
        ("gnn train --json = --data", gnn + ["--json", "OUT"], graph, "--data", "--json"),
        ("gnn train --checkpoint = --data", gnn + ["--checkpoint", "OUT"], graph, "--data", "--checkpoint"),
        ("gnn train --checkpoint plans = --data", [tool("tessel-gnn"), "train", "--data", graph, "--epochs", "1",
                                                   "--checkpoint", "OUT_PLAN"], graph, "--data", "--checkpoint"),
        ("gnn-bench --json = --data", [tool("tessel-gnn-bench"), "--data", graph, "--reps", "1", "--json", "OUT"], graph,
         "--data", "--json"),
        ("gnn-data csv --out = --edges", [tool("tessel-gnn-data"), "csv", "--edges", edges, "--out", "OUT"], edges,
         "--edges", "--out"),
        ("gnn-data csv --out = --targets", [tool("tessel-gnn-data"), "csv", "--edges", edges, "--targets", targets,
                                            "--out", "OUT"], targets, "--targets", "--out"),
        ("moe --json = the layer", [tool("tessel-moe"), layer, "--no-emulation", "--iters", "1", "--json", "OUT"], layer,
         "the layer file", "--json"),
        ("moe --trace = the layer", [tool("tessel-moe"), layer, "--no-emulation", "--iters", "1", "--trace", "OUT_RANK"],
         layer, "the layer file", "--trace"),
        ("sched simulate --json = --trace", sim + ["--json", "OUT"], trace, "--trace", "--json"),
        ("sched simulate --json = --cluster", [tool("tessel-sched"), "simulate", "--trace", trace, "--policy", "fcfs",
                                               "--cluster", spec, "--json", "OUT"], spec, "--cluster", "--json"),
        ("sched simulate --json in --profile", sim + ["--profile", profile, "--json", "OUT"],
         os.path.join(profile, "dp_mem.json"), "--profile", "--json"),
        ("sched estimate --json in --profile", [tool("tessel-sched"), "estimate", "--profile", profile, "--json", "OUT"],
         os.path.join(profile, "dp_mem.json"), "--profile", "--json"),
        ("sched-bench --json = --trace", [tool("tessel-sched-bench"), "--trace", trace, "--repeat", "1", "--json",
                                          "OUT"], trace, "--trace", "--json"),
        ("sched-data crius-trace OUT = IN", [tool("tessel-sched-data"), "crius-trace", crius, "OUT"], crius, "IN.csv",
         "OUT.h5"),
        ("sched-data elasticflow-trace OUT = IN", [tool("tessel-sched-data"), "elasticflow-trace", elastic, "OUT"],
         elastic, "IN.csv", "OUT"),
        ("sched-data synth OUT = --cluster", [tool("tessel-sched-data"), "synth", "OUT", "--cluster", spec], spec,
         "--cluster", "OUT"),
        ("sched-data cluster OUT = --crius-spec", [tool("tessel-sched-data"), "cluster", "--crius-spec", spec, "OUT"],
         spec, "--crius-spec", "OUT"),
    ]
    for what, argv, source, in_option, out_option in cases:
        original = open(source, "rb").read()
        spellings = [("the same path", source)]
        link = os.path.join(WORK, "link-" + os.path.basename(source))
        hard = os.path.join(WORK, "hard-" + os.path.basename(source))
        for path in (link, hard):
            if os.path.lexists(path):
                os.remove(path)
        os.symlink(source, link)
        os.link(source, hard)
        spellings += [("a symbolic link", link), ("a hard link", hard),
                      ("another spelling", os.path.join(os.path.dirname(source), ".", os.path.basename(source)))]
        for how, out in spellings:
            full = list(argv)
            if "OUT_PLAN" in full:
                # The adaptive kernel writes its plans beside the checkpoint CK (CK.plan.h5): with --data CK.plan.h5
                # the plans would replace the data.
                if how != "the same path":
                    continue
                plans = os.path.join(WORK, "ck.plan.h5")
                shutil.copyfile(source, plans)
                full[full.index("OUT_PLAN")] = os.path.join(WORK, "ck")
                full[full.index("--data") + 1] = plans
                status, stdout, err, _ = run(full)
                check(status == 2 and "--checkpoint's plans" in err and "--data" in err and "same file" in err,
                      what + ": expected a usage error naming both", "status %d: %s" % (status, err))
                check(open(plans, "rb").read() == original, what + ": the input was changed")
                continue
            if "OUT_RANK" in full:
                # --trace T writes T.rank0.json: a link of that name to the input.
                alias = os.path.join(WORK, "tr-" + how.replace(" ", "-"))
                if os.path.lexists(alias + ".rank0.json"):
                    os.remove(alias + ".rank0.json")
                os.symlink(out if os.path.isabs(out) else os.path.abspath(out), alias + ".rank0.json")
                full[full.index("OUT_RANK")] = alias
            else:
                full[full.index("OUT")] = out
            status, stdout, err, _ = run(full)
            where = "%s (%s)" % (what, how)
            check(status == 2, where + ": exit status %d, expected 2 (refused before any work)" % status,
                  stdout[-300:] + err)
            check(in_option in err and out_option in err and "same file" in err, where + ": the error names both "
                  "options", err)
            check(open(source, "rb").read() == original, where + ": the input was changed")
            for_people(err, where)
    # Two outputs that are one file.
    for what, argv, first, second in [
        ("gnn train --json = --checkpoint", gnn + ["--json", "OUT", "--checkpoint", "OUT2"], "--json", "--checkpoint"),
        ("moe --json = --trace", [tool("tessel-moe"), layer, "--no-emulation", "--iters", "1", "--json", "OUT.rank0.json",
                                  "--trace", "OUT"], "--json", "--trace"),
        ("sched estimate --json = --dump", [tool("tessel-sched"), "estimate", "--profile", profile, "--json", "OUT",
                                            "--dump", "OUT2"], "--json", "--dump"),
        ("sched-bench --json = --decisions", [tool("tessel-sched-bench"), "--trace", trace, "--repeat", "1", "--json",
                                              "OUT", "--decisions", "OUT2"], "--json", "--decisions"),
        ("moe-bench --json = --registry", [tool("tessel-moe-bench"), "--smoke", "--tune", "--json", "OUT",
                                           "--registry", "OUT2"], "--json", "--registry"),
        ("moe train --json = --problem", [tool("tessel-moe"), "train", "--steps", "3", "--batch", "32", "--json", "OUT",
                                          "--problem", "OUT2"], "--json", "--problem"),
    ]:
        out = os.path.join(WORK, "twice.out")
        for spelling in (out, os.path.join(WORK, ".", "twice.out")):
            if os.path.exists(out):
                os.remove(out)
            full = [a.replace("OUT2", spelling).replace("OUT", out) for a in argv]
            status, stdout, err, _ = run(full)
            check(status == 2 and first in err and second in err and "same file" in err,
                  what + ": expected a usage error naming both options", "status %d: %s" % (status, err))
            check(not os.path.exists(out), what + ": an output was written")
            for_people(err, what)
    # The per-user tuning cache that first-use tuning writes is an output too: never the layer, --json or --problem.
    cache = os.path.join(WORK, "cache-as-output")
    os.makedirs(cache, exist_ok=True)
    cached = os.path.join(cache, "moe-tuning.registry")
    for what, argv, source, first, second in [
        ("moe: the layer is the tuning cache", [tool("tessel-moe"), cached, "--no-emulation", "--iters", "1",
                                                "--schedule", "comet"], layer, "the layer file", "tuning cache"),
        ("moe: --json is the tuning cache", [tool("tessel-moe"), layer, "--no-emulation", "--iters", "1", "--schedule",
                                             "comet", "--json", cached], None, "--json", "tuning cache"),
        ("moe train: --problem is the tuning cache", [tool("tessel-moe"), "train", "--steps", "3", "--batch", "32",
                                                      "--problem", cached], None, "--problem", "tuning cache")]:
        if os.path.lexists(cached):
            os.remove(cached)
        if source:
            shutil.copyfile(source, cached)
        original = open(cached, "rb").read() if source else None
        status, stdout, err, _ = run(argv, env={"TESSEL_CACHE_DIR": cache})
        check(status == 2 and first in err and second in err and "same file" in err,
              what + ": expected a usage error naming both", "status %d: %s" % (status, err))
        if source:
            check(open(cached, "rb").read() == original, what + ": the layer was changed")
        else:
            check(not os.path.exists(cached), what + ": an output was written")
        for_people(err, what)
    # Distinct files, devices and links to other files are accepted.
    status, _, err, _ = run(gnn + ["--json", os.path.join(WORK, "g.json"), "--checkpoint", os.path.join(WORK, "g.ck")])
    check(status == 0, "gnn train with distinct outputs", err)
    status, _, err, _ = run([tool("tessel-comm-bench"), "-b", "8", "-e", "8", "-J", "/dev/null"])
    check(status == 0, "comm-bench -J /dev/null", err)
    status, _, err, _ = run(sim + ["--json", "/dev/null"])
    check(status == 0, "sched simulate --json /dev/null", err)
    finish()


# ---------------------------------------------------------------------------------------------------------------
# inputs: every input read by every tool (and by the library on its behalf) is a regular file of bounded size:
# devices, named pipes and folders are refused with an error naming them, never read until memory runs out or
# waited on for ever
# ---------------------------------------------------------------------------------------------------------------
def run_or_kill(argv, timeout=60, env=None, stdin=None):
    """(status, stderr), status None when the tool was still running after \p timeout seconds (then killed)."""
    e = dict(os.environ)
    e.setdefault("TESSEL_CACHE_DIR", os.path.join(WORK, "cache"))
    e.update(env or {})
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=stdin, text=True,
                         errors="replace", env=e, cwd=WORK, start_new_session=True)
    try:
        _, err = p.communicate(timeout=timeout)
        return p.returncode, err
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        return None, ""


def case_inputs():
    layer, graph, trace, crius, elastic, spec, edges = reader_inputs()
    fifo = os.path.join(WORK, "fifo")
    if not os.path.exists(fifo):
        os.mkfifo(fifo)
    folder = os.path.join(WORK, "a-folder")
    os.makedirs(folder, exist_ok=True)
    out = os.path.join(WORK, "out")
    readers = [  # (what, argv reading PATH)
        ("gnn train --data", [tool("tessel-gnn"), "train", "--data", "PATH", "--epochs", "1"]),
        ("gnn info --data", [tool("tessel-gnn"), "info", "--data", "PATH"]),
        ("gnn train --resume --checkpoint", [tool("tessel-gnn"), "train", "--data", graph, "--epochs", "1", "--quiet",
                                             "--kernel", "csr", "--resume", "--checkpoint", "PATH"]),
        ("gnn-bench --data", [tool("tessel-gnn-bench"), "--data", "PATH", "--reps", "1"]),
        ("gnn-data csv --edges", [tool("tessel-gnn-data"), "csv", "--edges", "PATH", "--out", out + ".h5"]),
        ("gnn-data csv --targets", [tool("tessel-gnn-data"), "csv", "--edges", edges, "--targets", "PATH", "--out",
                                    out + ".h5"]),
        ("moe FILE", [tool("tessel-moe"), "PATH", "--no-emulation", "--iters", "1"]),
        ("moe --tuning", [tool("tessel-moe"), layer, "--no-emulation", "--iters", "1", "--tuning", "PATH"]),
        ("moe --tune --registry", [tool("tessel-moe"), layer, "--no-emulation", "--iters", "1", "--schedule", "comet",
                                   "--tune", "--registry", "PATH"]),
        ("sched simulate --trace", [tool("tessel-sched"), "simulate", "--trace", "PATH", "--policy", "fcfs"]),
        ("sched simulate --cluster", [tool("tessel-sched"), "simulate", "--trace", trace, "--policy", "fcfs",
                                      "--cluster", "PATH"]),
        ("sched simulate --profile", [tool("tessel-sched"), "simulate", "--trace", trace, "--policy", "fcfs",
                                      "--profile", "PATH"]),
        ("sched estimate --profile", [tool("tessel-sched"), "estimate", "--profile", "PATH"]),
        ("sched-bench --trace", [tool("tessel-sched-bench"), "--trace", "PATH", "--repeat", "1"]),
        ("sched-data crius-trace", [tool("tessel-sched-data"), "crius-trace", "PATH", out + ".h5"]),
        ("sched-data elasticflow-trace", [tool("tessel-sched-data"), "elasticflow-trace", "PATH", out + ".h5"]),
        ("sched-data cluster IN", [tool("tessel-sched-data"), "cluster", "PATH", out + ".h5"]),
        ("sched-data cluster --crius-spec", [tool("tessel-sched-data"), "cluster", "--crius-spec", "PATH",
                                             out + ".h5"]),
        ("sched-data cluster --device-infos", [tool("tessel-sched-data"), "cluster", "--crius-spec", spec,
                                               "--device-infos", "PATH", out + ".h5"]),
        ("sched-data synth --cluster", [tool("tessel-sched-data"), "synth", out + ".csv", "--cluster", "PATH"]),
    ]
    kinds = [("a named pipe", fifo), ("/dev/zero", "/dev/zero"), ("/dev/full", "/dev/full"), ("a folder", folder),
             ("standard input", "/dev/stdin")]
    # A regular file of the kernel without an end, whose reads wait for messages (reading it takes only what other
    # readers of it, a syslog daemon, would get; the kernel's log keeps them).
    if os.access("/proc/kmsg", os.R_OK):
        kinds.append(("/proc/kmsg", "/proc/kmsg"))
    for what, argv in readers:
        for kind, path in kinds:
            if kind == "a folder" and what in ("sched simulate --profile", "sched estimate --profile"):
                continue  # a folder of profile tables is the documented form (an empty one fails on its files)
            t0 = time.monotonic()
            # Standard input: a pipe whose writer stays open and silent.
            pipe = os.pipe() if path == "/dev/stdin" else None
            status, err = run_or_kill([a.replace("PATH", path) for a in argv], timeout=60,
                                      stdin=pipe[0] if pipe else None)
            for end in pipe or ():
                os.close(end)
            where = "%s given %s" % (what, kind)
            check(status is not None, where + ": still running after 60 s (blocked or reading without end)")
            if status is None:
                continue
            check(status in (1, 2), where + ": exit status %d, expected an error" % status, err)
            check(path in err, where + ": the error does not name the file", err)
            check(time.monotonic() - t0 < 30, where + ": took %.0f s" % (time.monotonic() - t0))
            for_people(err, where)
    # The implicit tuning cache of the MoE layer: a named pipe there is reported and skipped, not waited on.
    cache = os.path.join(WORK, "fifo-cache")
    os.makedirs(cache, exist_ok=True)
    if not os.path.exists(os.path.join(cache, "moe-tuning.registry")):
        os.mkfifo(os.path.join(cache, "moe-tuning.registry"))
    status, err = run_or_kill([tool("tessel-moe"), layer, "--no-emulation", "--iters", "1", "--schedule", "comet"],
                              timeout=120, env={"TESSEL_CACHE_DIR": cache})
    check(status == 0 and "not a regular file" in err, "moe with a named pipe as its tuning cache: expected a "
          "warning, not a wait", "status %s: %s" % (status, err))
    # Standard input of submit: an endless stream is refused at the JSON bound, not held in memory.
    state = os.path.join(WORK, "no-state")
    with open("/dev/zero", "rb") as zero:
        status, err = run_or_kill([tool("tessel-sched"), "submit", "--state", state, "-"], timeout=120, stdin=zero)
    check(status in (1, 2), "submit - with /dev/zero on standard input: expected an error",
          "status %s: %s" % (status, err))
    finish()


# ---------------------------------------------------------------------------------------------------------------
# numbers: values that silently became other values, derived quantities that overflowed, vague errors
# ---------------------------------------------------------------------------------------------------------------
def case_numbers():
    def refused(argv, code, words, what, env=None, timeout=60):
        status, err = run_or_kill(argv, timeout=timeout, env=env)
        check(status == code and all(w in err for w in words), what + ": expected exit %d naming %s" % (code, words),
              "status %s: %s" % (status, err))
        if status is not None:
            for_people(err, what)
        return err

    comm = tool("tessel-comm-bench")
    # A factor barely above 1 asked for 28 million sizes; a byte count of 1.5 was 1 byte; 0x10 s were 16 s.
    refused([comm, "-b", "8", "-e", "1G", "-f", "1.0000001"], 2, ["-f/--stepfactor", "1.0000001", "1000 sizes"],
            "comm-bench -f 1.0000001", timeout=30)
    refused([comm, "-b", "1.5", "-e", "8"], 2, ["-b/--minbytes", "whole number of bytes", "1.5"], "comm-bench -b 1.5")
    refused([comm, "-b", "8", "-e", "8.5"], 2, ["-e/--maxbytes", "whole number of bytes"], "comm-bench -e 8.5")
    status, out, err, _ = run([comm, "-b", "1.5K", "-e", "2K", "-f", "1.2", "-n", "1", "-w", "0"])
    check(status == 0 and "1536" in out, "comm-bench -b 1.5K (1536 bytes) is accepted", err)
    err = refused([comm, "-b", "8", "-e", "8"], 2, ["TESSEL_COMM_TIMEOUT", "0x10"], "TESSEL_COMM_TIMEOUT=0x10",
                  env={"TESSEL_COMM_TIMEOUT": "0x10"})
    check("same command line" not in err, "TESSEL_COMM_TIMEOUT=0x10: blamed on the command line", err)
    status, _, err, _ = run([comm, "-b", "8", "-e", "8", "-n", "1"], env={"TESSEL_COMM_TIMEOUT": "2.5"})
    check(status == 0, "TESSEL_COMM_TIMEOUT=2.5 is accepted", err)
    # Hexadecimal integers and floats in a trace are not read as numbers.
    header = "job_id,submission_time,num_iteration,model_name,deadline,batch_size,num_gpu,gpu_type\n"
    for field, row in (("submission_time", "j0,0x10,100,bert__1.3B,0,128,1,a100\n"),
                       ("num_iteration", "j0,0,0x64,bert__1.3B,0,128,1,a100\n"),
                       ("submission_time", "j0,0x1p4,100,bert__1.3B,0,128,1,a100\n")):
        path = os.path.join(WORK, "hex.csv")
        with open(path, "w") as f:
            f.write(header + row)
        refused([tool("tessel-sched"), "simulate", "--trace", path, "--policy", "fcfs"], 1, [path, field],
                "a trace with %s in %s" % (row.split(",")[1 if field == "submission_time" else 2], field))
    # A byte-order mark before the header (spreadsheets write one) is not part of the first column's name.
    for name, text in (("bom-trace.csv", header + "j0,0,100,bert__1.3B,0,128,1,a100\n"),):
        path = os.path.join(WORK, name)
        with open(path, "wb") as f:
            f.write(b"\xef\xbb\xbf" + text.encode())
        status, out, err, _ = run([tool("tessel-sched"), "simulate", "--trace", path, "--policy", "fcfs", "--quiet"])
        check(status == 0, "a trace whose header starts with a byte-order mark", err)
    edges = os.path.join(WORK, "bom-edges.csv")
    with open(edges, "wb") as f:
        f.write(b"\xef\xbb\xbfa,b\n0,1\n1,2\n")
    targets = os.path.join(WORK, "bom-targets.csv")
    with open(targets, "wb") as f:
        f.write(b"\xef\xbb\xbfid,target\n0,x\n1,y\n2,x\n")
    status, out, err, _ = run([tool("tessel-gnn-data"), "csv", "--edges", edges, "--targets", targets, "--out",
                               os.path.join(WORK, "bom.h5")])
    check(status == 0 and "3 nodes" in out, "targets whose header starts with a byte-order mark", err)
    # A key given twice in a JSON object: refused, naming the key and the file (the last one used to win).
    spec = os.path.join(WORK, "twice.json")
    with open(spec, "w") as f:
        f.write('[{"a100": {"node_num": 2}, "a100": {"node_num": 3}}]\n')
    refused([tool("tessel-sched-data"), "cluster", "--crius-spec", spec, os.path.join(WORK, "c.h5")], 1,
            [spec, "duplicate key 'a100'"], "a JSON key given twice")
    with open(spec, "w") as f:
        f.write('[{"a100": {"node_num": 2, "node_num": 3}}]\n')
    refused([tool("tessel-sched-data"), "cluster", "--crius-spec", spec, os.path.join(WORK, "c.h5")], 1,
            [spec, "duplicate key 'node_num'", "'a100'"], "a JSON key given twice in a nested object")
    # Edge lists that hold no edge: a graph of no nodes was written, and benchmarks printed ratios of nothing.
    empty = os.path.join(WORK, "empty.csv")
    open(empty, "w").close()
    header_only = os.path.join(WORK, "header-only.csv")
    with open(header_only, "w") as f:
        f.write("a,b\n")
    folder = os.path.join(WORK, "a-folder")
    os.makedirs(folder, exist_ok=True)
    for what, path, words in (("an empty edge list", empty, ["is empty"]),
                              ("a header-only edge list", header_only, ["holds no edge"]),
                              ("a folder as the edge list", folder, ["is a directory"] if False else ["folder"])):
        out = os.path.join(WORK, "nothing.h5")
        status, _, err, _ = run([tool("tessel-gnn-data"), "csv", "--edges", path, "--out", out])
        check(status == 1 and path in err and not os.path.exists(out), what + ": expected an error naming the file",
              "status %d: %s" % (status, err))
        for_people(err, what)
    # A dataset an HDF5 file declares larger than the memory: the size is named, not "out of memory".
    try:
        import h5py  # noqa: F401
        # A valid layer whose tokens are declared as 2^30 - 1 rows of 64 floats (256 GiB, within the index range; the
        # file stays small: HDF5 allocates a dataset's storage when it is written).
        layer, _ = make_inputs()
        huge = os.path.join(WORK, "huge.h5")
        shutil.copyfile(layer, huge)
        with h5py.File(huge, "a") as f:
            hidden = f["tokens"].shape[1]
            del f["tokens"]
            f.create_dataset("tokens", shape=((1 << 30) - 1, hidden), dtype="float32")
        status, _, err, _ = run([tool("tessel-moe"), huge, "--no-emulation"])
        check(status == 1 and huge in err and "would need" in err and "GiB" in err and "out of memory" not in err,
              "a layer declaring 2^30 - 1 tokens: expected the file and the size named", "status %d: %s" % (status, err))
    except ImportError:
        print("no h5py: the dataset declared larger than the memory is not written")
    if MPIEXEC:
        # A link so slow that a message would take longer than a clock can count: refused naming the link, not
        # switched off (the duration wrapped and the benchmark ran unpaced).
        _, graph = make_inputs()
        argv = mpi(2, [tool("tessel-gnn-bench"), "--backend", "dist", "--data", graph, "--features", "8", "--reps",
                       "1", "--warmup", "0", "--bandwidth", "1e-300"])
        status, err = run_or_kill(argv, timeout=120)
        check(status == 1 and "emulated link" in err and "more than" in err,
              "gnn-bench --backend dist --bandwidth 1e-300: expected the link refused", "status %s: %s" % (status, err))
    finish()


# ---------------------------------------------------------------------------------------------------------------
# signals: SIGINT, SIGTERM and SIGHUP while an output is being written leave no hidden temporary file
# ---------------------------------------------------------------------------------------------------------------
def case_signals():
    layer, graph = make_inputs()
    folder = os.path.join(WORK, "signals")
    os.makedirs(folder, exist_ok=True)
    writers = [  # (what, argv writing PATH, file name): writers whose temporary lives long enough to be seen
        ("gnn-data sbm", [tool("tessel-gnn-data"), "sbm", "--nodes", "300000", "--community", "100", "--features",
                          "64", "--out", "PATH"], "big.h5"),
        ("moe-gen", [tool("tessel-moe-gen"), "--model", "mixtral", "--scale", "4", "--tokens", "32768", "--out",
                     "PATH"], "big-layer.h5"),
        ("gnn train checkpoints", [tool("tessel-gnn"), "train", "--data", graph, "--epochs", "100000", "--patience",
                                   "0", "--quiet", "--kernel", "csr", "--checkpoint", "PATH", "--checkpoint-every",
                                   "1"], "ck.h5"),
    ]
    for what, argv, name in writers:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGPIPE):
            for f in os.listdir(folder):
                os.remove(os.path.join(folder, f))
            target = os.path.join(folder, name)
            p = subprocess.Popen([a.replace("PATH", target) for a in argv], stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE, cwd=WORK, env=dict(os.environ, TESSEL_CACHE_DIR=os.path.join(
                                     WORK, "cache")), start_new_session=True)
            # The signal comes while the hidden temporary beside the target exists.
            seen = False
            end = time.monotonic() + 120
            while time.monotonic() < end and p.poll() is None and not seen:
                seen = any(f.startswith("." + name + ".tmp-") for f in os.listdir(folder))
            if seen:
                p.send_signal(sig)
            else:
                p.kill()
            try:
                p.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.communicate()
            where = "%s, %s while its output was written" % (what, signal.Signals(sig).name)
            check(seen, where + ": the temporary was never seen (the check did not run)")
            check(p.returncode == -sig, where + ": expected the process to end by the signal, status %s" % p.returncode)
            left = [f for f in os.listdir(folder) if f.startswith(".")]
            check(not left, where + ": temporaries left behind: " + ", ".join(left))
    finish()


{"options": case_options, "ranks": case_ranks, "faults_2": lambda: case_faults(2), "faults_4": lambda: case_faults(4),
 "full_disk": case_full_disk, "moe_numbers": case_moe_numbers, "outputs": case_outputs, "inputs": case_inputs,
 "numbers": case_numbers, "signals": case_signals}[CASE]()
