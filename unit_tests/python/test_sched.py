"""tessel.sched: the simulator reproduces `tessel-sched simulate` exactly on the shared philly trace; loaders,
estimator, best plan and best Cell."""
import json
import subprocess

import pytest

import tessel.sched as ts
from conftest import build_dir, data_dir

TIMING = {"sched_seconds", "sched_ms_per_round", "sched_ms_max", "wall_seconds"}


def crius_dir():
    d = data_dir() / "traces" / "crius"
    if not (d / "simulate_trace_philly.csv").exists():
        pytest.skip(f"data set not found: {d} (set TESSEL_DATA_DIR)")
    return d


def cli():
    found = sorted(build_dir().glob("apps/**/tessel-sched"))
    if not found:
        pytest.skip(f"tessel-sched not built under {build_dir()}")
    return found[0]


@pytest.mark.parametrize("extra", [[], ["--arena-compat", "--rounds", "2000"]], ids=["exact", "arena-compat"])
def test_simulate_reproduces_the_cli(tmp_path, extra):
    d = crius_dir()
    trace, out = d / "simulate_trace_philly.csv", tmp_path / "cli.json"
    subprocess.run([str(cli()), "simulate", "--trace", str(trace), "--profile", str(d), "--policy", "all", "--quiet",
                    "--json", str(out)] + extra, check=True, stdout=subprocess.DEVNULL)
    expected = json.loads(out.read_text())
    options = {"arena_compat": True, "max_rounds": 2000} if extra else {}
    got = ts.simulate(trace, cluster="crius", profile=d, policies="all", **options)
    assert sorted(got) == sorted(expected["policies"])
    for policy, want in expected["policies"].items():
        r = got[policy]
        m = r.metrics
        for key, value in want.items():
            if key in TIMING or key in ("jct", "rejected", "jobs", "stalls", "round_time", "throughput", "running",
                                        "pending", "sched_ms"):
                continue
            assert m[key] == value, (policy, key, m[key], value)
        jobs = r.jobs.to_dict("records") if hasattr(r.jobs, "to_dict") else r.jobs
        assert [j["jct"] for j in jobs if j["state"] == "completed"] == want["jct"], policy
        for mine, theirs in zip(jobs, want["jobs"], strict=True):
            for key in ("id", "state", "submit_time", "start_time", "finish_time", "jct", "gpu_type", "num_gpus",
                        "reschedules", "failures"):
                assert mine[key] == theirs[key], (policy, mine["id"], key)
        rounds = r.rounds.to_dict("list") if hasattr(r.rounds, "to_dict") else r.rounds
        for key in ("round_time", "throughput", "running", "pending"):
            assert list(rounds[key]) == want[key], (policy, key)
        assert r.stalls == want["stalls"]


def test_loaders_return_plain_objects():
    d = crius_dir()
    cluster = ts.load_cluster("crius")
    assert cluster.num_gpus == 1280 and [t["name"] for t in cluster.types] == ["a100", "v100", "a40", "a10"]
    trace = ts.load_trace(d / "simulate_trace_philly.csv", cluster)
    jobs = ts.trace_jobs(trace)
    assert len(jobs) == len(trace) > 1000
    pandas = pytest.importorskip("pandas")
    assert isinstance(jobs, pandas.DataFrame) and {"id", "model", "num_gpus", "gpu_type"} <= set(jobs.columns)
    profile = ts.load_profile(d)
    assert len(profile) > 0 and {"model", "iter_time"} <= set(profile.entries[0])


def test_estimate_best_and_best_cell():
    cluster = ts.Cluster.from_groups([("a100", (2, 4)), ("v100", (1, 8))])
    assert cluster.num_gpus == 16
    e = ts.estimate("gpt__1.3B", 16, "a100", 1, 4, [(4, 1)], cluster=cluster)
    assert e["valid"] and e["e2e"] == pytest.approx(e["comp"] + e["intra"] + e["inter"])
    b = ts.best("gpt__1.3B", 16, "a100", 2, 4, cluster=cluster)
    assert b["feasible"] and b["cell"]["num_gpus"] == 8
    cell = ts.best_cell("gpt__1.3B", 16, 8, cluster=cluster)
    assert cell["feasible"]
    # The best over types, layouts and both strategies is no slower than any one of them.
    for t, layout in (("a100", (2, 4)), ("v100", (1, 8))):
        for s in ("greedy", "uniform"):
            other = ts.best("gpt__1.3B", 16, t, *layout, strategy=s, cluster=cluster)
            if other["feasible"]:
                assert cell["estimate"]["e2e"] <= other["estimate"]["e2e"]
    none = ts.best_cell("gpt__1.3B", 16, 64, cluster=cluster)
    assert not none["feasible"] and "a100: the cluster has 8 GPUs" in none["why"]


def cli_cells(args):
    """The Cells and plans `tessel-sched cells` prints: [((hosts, per_host, stages), [(strategy, key, micro_batches,
    e2e, comp, intra, inter, memory_gb) or (strategy, None)])]."""
    out = subprocess.run([str(cli()), "cells"] + args, check=True, capture_output=True, text=True).stdout
    cells = []
    for line in out.splitlines()[1:]:
        f = line.replace("(", " ").replace(")", " ").replace(",", " ").split()
        if line.startswith("Cell "):
            cells.append(((int(f[1]), int(f[4]), int(f[6])), []))
        elif "no plan fits" in line:
            cells[-1][1].append((f[0], None))
        else:
            cells[-1][1].append((f[0], f[1], int(f[3]), float(f[5]), float(f[8]), float(f[10]), float(f[12]),
                                 float(f[13])))
    return cells


@pytest.mark.parametrize("model,batch,gpu,gpus,profiled", [("gpt__1.3B", 16, "a100", 8, False),
                                                           ("bert__2.6B", 32, "v100", 16, True),
                                                           ("gpt__6.7B", 16, "v100", 2, False)],
                         ids=["gpt-8xa100", "bert-16xv100-profiled", "nothing-fits"])
def test_cells_match_the_cli(model, batch, gpu, gpus, profiled):
    args = ["--model", model, "--batch", str(batch), "--gpu", gpu, "--gpus", str(gpus), "--strategy", "all"]
    profile = None
    if profiled:
        profile = crius_dir()
        args += ["--profile", str(profile)]
    want = cli_cells(args)
    got = ts.cells(model, batch, gpu, gpus, strategies="all", profile=profile)
    assert len(got) == len(want) > 0
    for cell, (shape, plans) in zip(got, want):
        assert (cell["hosts"], cell["per_host"], cell["stages"]) == shape
        assert cell["model"] == model and cell["gpu_type"] == gpu and cell["num_gpus"] == gpus
        strategies = ["minimal", "uniform", "greedy"]
        # The CLI prints one "(no plan fits)" line for a strategy without plans; Python returns no plan for it.
        assert [p["strategy"] for p in cell["plans"]] == [p[0] for p in plans if p[1] is not None]
        assert {p[0] for p in plans} == set(strategies)
        for mine, theirs in zip(cell["plans"], [p for p in plans if p[1] is not None]):
            e = mine["estimate"]
            assert (mine["key"], mine["micro_batches"]) == theirs[1:3]
            assert e["valid"] and e["fits"]
            for value, printed, digits in zip((e["e2e"], e["comp"], e["intra"], e["inter"], e["memory_gb"]),
                                              theirs[3:], (3, 3, 3, 3, 1)):
                assert value == pytest.approx(printed, abs=0.5001 * 10 ** -digits), (mine, theirs)
    if model == "gpt__6.7B":
        assert all(not c["plans"] for c in got)


def test_cells_bad_input():
    with pytest.raises(ValueError, match="power of two, got 6"):
        ts.cells("gpt__1.3B", 16, "a100", 6)
    with pytest.raises(ValueError, match="unknown plan strategy 'fast'"):
        ts.cells("gpt__1.3B", 16, "a100", 8, strategies="fast")
    with pytest.raises(ValueError, match="GPU type 'h100' is not in the cluster"):
        ts.cells("gpt__1.3B", 16, "h100", 8)
    with pytest.raises(ValueError, match="unknown model 'gpt__2B'"):
        ts.cells("gpt__2B", 16, "a100", 8)
