"""The gnn tools as a hostile user meets them: options that would act only in some runs, data and checkpoints that
claim what they are not, lists naming a value twice, inputs with nothing to time. Real processes on real files.

    tools_gnn_test.py WORK_DIR NAME=PATH...     (tessel-gnn, tessel-gnn-bench, tessel-gnn-data)

Exits 0 when every check passed, 1 otherwise, listing every failed check. The file written by a newer writer
(directed = 2) needs h5py; without it that check is skipped and said so.
"""

import os
import subprocess
import sys

WORK = sys.argv[1]
TOOLS = dict(a.split("=", 1) for a in sys.argv[2:])
os.makedirs(WORK, exist_ok=True)
failures = []
checks = 0


def run(name, *args, timeout=300):
    """(status, stdout, stderr) of a finished tool."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    p = subprocess.run([TOOLS[name]] + list(args), capture_output=True, text=True, timeout=timeout, env=env,
                       cwd=WORK)
    return p.returncode, p.stdout, p.stderr


def check(ok, what, detail=""):
    global checks
    checks += 1
    if not ok:
        failures.append(what + (": " + detail.strip()[-1500:] if detail else ""))


def refused(status, err, code, words, what):
    check(status == code and words in err, what + " (exit %s, expected %d and '%s')" % (status, code, words), err)


def path(name):
    return os.path.join(WORK, name)


def write(name, text):
    with open(path(name), "w") as f:
        f.write(text)
    return path(name)


def sbm(name, *extra):
    status, _, err = run("tessel-gnn-data", "sbm", "--nodes", "300", "--community", "30", "--p-in", "0.2",
                         "--features", "6", "--classes", "3", "--out", path(name), *extra)
    check(status == 0, "tessel-gnn-data sbm " + name, err)
    return path(name)


graph = sbm("g.h5")
featureless = sbm("bare.h5", "--features", "0")
TRAIN = ["train", "--quiet", "--epochs", "3", "--kernel", "csr", "--patience", "0"]

# Options that act only in some runs are refused where they would be ignored without a word.
status, _, err = run("tessel-gnn", *TRAIN, "--data", graph, "--random-features", "16")
refused(status, err, 2, "has 6 features of its own", "--random-features on a data set with features")
status, _, err = run("tessel-gnn", *TRAIN, "--data", featureless, "--random-features", "16")
check(status == 0, "--random-features on a data set without features (control)", err)
for option, value in (("--dist-partition", "contiguous"), ("--dist-schedule", "sequential")):
    status, _, err = run("tessel-gnn", *TRAIN, "--data", graph, option, value)
    refused(status, err, 2, "run under mpiexec -n W with W > 1", option + " in one process")

# A checkpoint is for its data set by content, not by name: another graph of the same name does not resume.
ck = path("ck.h5")
status, _, err = run("tessel-gnn", *TRAIN, "--data", graph, "--checkpoint", ck)
check(status == 0, "writing a checkpoint (control)", err)
other = sbm("other.h5", "--seed", "2")  # the same parameters: the same name
status, _, err = run("tessel-gnn", *TRAIN, "--data", other, "--checkpoint", ck, "--resume", "--epochs", "6")
refused(status, err, 1, "with other content than this run's", "a checkpoint of another graph with the same name")
status, out, err = run("tessel-gnn", *TRAIN, "--data", graph, "--checkpoint", ck, "--resume", "--epochs", "6")
check(status == 0 and "finished after 6 epochs" in out, "resuming on the same graph (control)", out + err)
if os.path.exists(path("none.h5")):  # written by an earlier run of this test
    os.remove(path("none.h5"))
status, out, err = run("tessel-gnn", *TRAIN, "--data", graph, "--checkpoint", path("none.h5"), "--resume")
check(status == 0 and "no checkpoint at" in out, "--resume with no checkpoint yet says so", out + err)

# Values accepted as something else: a 0/1 flag with another value.
try:
    import h5py  # noqa: E402

    import shutil

    shutil.copy(graph, path("directed2.h5"))
    with h5py.File(path("directed2.h5"), "r+") as f:
        f.attrs.modify("directed", 2)
    for tool, args in (("tessel-gnn", TRAIN), ("tessel-gnn", ["info"]), ("tessel-gnn-bench", ["--reps", "1"])):
        status, _, err = run(tool, *args, "--data", path("directed2.h5"))
        refused(status, err, 1, "root attribute directed = 2, expected 0 or 1", tool + " on directed = 2")
    # A graph without nodes: nothing to time, no ratios of nothing.
    with h5py.File(path("empty_graph.h5"), "w") as f:
        f.attrs["schema"] = "tessel.gnn.graph"
        f.attrs.create("schema_version", 1, dtype="int32")
        f.attrs["name"] = "empty"
        f.create_dataset("graph/indptr", data=[0])
        f.create_dataset("graph/indices", data=[], dtype="int64")
    for backend in ("host", "dist"):
        status, out, err = run("tessel-gnn-bench", "--backend", backend, "--reps", "1", "--data",
                               path("empty_graph.h5"))
        refused(status, err, 1, "has no nodes: there is nothing to time", "tessel-gnn-bench --backend %s on 0 nodes"
                % backend)
except ImportError:
    print("skipped: the checks on crafted files (directed = 2, 0 nodes) need h5py")

# No ratio without something to compare with; a list naming a value twice.
status, out, err = run("tessel-gnn-bench", "--data", graph, "--kernels", "adaptive", "--features", "8", "--reps", "2")
check(status == 0 and "no single full-graph kernel was timed beside adaptive: no ratio" in out and "inf" not in out,
      "adaptive alone prints no ratio", out + err)
for option, value in (("--kernels", "csr,adaptive,csr"), ("--features", "8,16,8")):
    status, _, err = run("tessel-gnn-bench", "--data", graph, option, value, "--reps", "1")
    refused(status, err, 2, "lists %s twice" % value.split(",")[0], "tessel-gnn-bench " + option + " " + value)
status, _, err = run("tessel-gnn-bench", "--data", graph, "--kernels", "cusparse", "--reps", "1")
refused(status, err, 2, "cuSPARSE is a device kernel", "--kernels cusparse on the host")

# The data tool: a node twice in a targets file, a node id whose table would not fit, a split with no training node,
# a probability so small that the geometric skips overflowed.
edges = write("e.csv", "a,b\n0,1\n1,2\n2,0\n")
CSV = ["csv", "--edges", edges, "--out", path("c.h5"), "--id-column", "id", "--target-column", "t"]
status, _, err = run("tessel-gnn-data", *CSV, "--targets", write("dup.csv", "id,t\n0,x\n1,y\n0,y\n"))
refused(status, err, 1, "node id 0 has a row on line 2 and again on line 4", "a node twice in a targets file")
status, _, err = run("tessel-gnn-data", *CSV, "--targets", write("big.csv", "id,t\n0,x\n2000000000,y\n"))
refused(status, err, 2, "(largest id 2000000000) would need", "a targets file with a huge node id")
status, _, err = run("tessel-gnn-data", *CSV, "--targets", write("ok.csv", "id,t\n0,x\n1,y\n2,x\n"), "--split", "0,1,1")
refused(status, err, 2, "PER_CLASS = 0 leaves no training node", "--split 0,1,1")
status, out, err = run("tessel-gnn-data", *CSV, "--targets", path("ok.csv"), "--split", "1,5,5")
check(status == 0 and "note: --split asked for 5 validation and 5 test nodes" in out,
      "a split larger than the data says so", out + err)
status, out, err = run("tessel-gnn-data", "sbm", "--nodes", "1000", "--community", "10", "--p-in", "1e-300",
                       "--out", path("tiny_p.h5"))
check(status == 0, "sbm --p-in 1e-300", out + err)
status, out, err = run("tessel-gnn", "info", "--data", path("tiny_p.h5"))
check(status == 0 and "1000 nodes" in out, "the sbm --p-in 1e-300 graph loads", out + err)

print("%d checks, %d failed" % (checks, len(failures)))
for f in failures:
    print("FAILED: " + f)
sys.exit(1 if failures else 0)
