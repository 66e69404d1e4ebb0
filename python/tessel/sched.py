"""Crius's scheduler from Python: clusters, traces and profile tables (the C++ loaders), the trace-driven simulator
(the same computation as ``tessel-sched simulate``: same numbers) and the plan estimator.

Results are plain Python objects (dicts, lists), and pandas DataFrames where a table is natural (jobs, rounds) when
pandas is installed.

>>> import tessel.sched as ts
>>> r = ts.simulate("simulate_trace_philly.csv", profile="traces/crius", policies=["crius", "fcfs"])
>>> r["crius"].metrics["avg_jct"], r["fcfs"].jobs.head()
"""
import os

from . import _tessel

_s = _tessel.sched

Cluster = _s.Cluster
Trace = _s.Trace
ProfileTable = _s.ProfileTable
policy_names = _s.policy_names
model_names = _s.model_names

__all__ = ["Cluster", "Trace", "ProfileTable", "SimulationResult", "load_cluster", "load_trace", "load_profile",
           "simulate", "estimate", "best", "best_cell", "cells", "policy_names", "model_names", "frame"]


def frame(rows):
    """A pandas DataFrame of a list of dicts (or dict of lists) when pandas is installed, else the input."""
    try:
        import pandas
    except ImportError:
        return rows
    return pandas.DataFrame(rows)


def load_cluster(path="crius"):
    """A cluster from HDF5 or CSV; ``"crius"``: Crius's simulated 1,280-GPU cluster."""
    return Cluster.load(str(path))


def load_trace(path, cluster="crius"):
    """A trace (Crius CSV or HDF5); GPU type names are resolved against ``cluster``."""
    return Trace.load(str(path), _cluster(cluster))


def load_profile(path):
    """Profile tables: HDF5 or a folder of Crius's files (prof_database.csv, ...)."""
    return ProfileTable.load(str(path))


def trace_jobs(trace):
    """The jobs of a trace as a DataFrame (or a list of dicts without pandas)."""
    return frame(trace.jobs)


def _cluster(c):
    return c if isinstance(c, Cluster) else load_cluster(c)


def _profile(p):
    if p is None or isinstance(p, ProfileTable):
        return p
    return load_profile(p)


class SimulationResult:
    """One policy's run: ``metrics`` (dict: JCTs, makespan, queueing, throughput, utilization per GPU type, ...),
    ``jobs`` (one row per job: state, times, last allocation), ``rounds`` (per-round series), ``stalls``."""

    def __init__(self, raw):
        self.policy = raw["policy"]
        self.metrics = raw["metrics"]
        self.jobs = frame(raw["jobs"])
        self.rounds = frame(raw["rounds"])
        self.stalls = raw["stalls"]
        self.throughput_source = raw["throughput_source"]

    def __repr__(self):
        m = self.metrics
        return (f"SimulationResult({self.policy}: {m['completed']}/{m['submitted']} completed, avg JCT "
                f"{m['avg_jct']:.0f} s, makespan {m['makespan']:.0f} s)")


def simulate(trace, cluster="crius", profile=None, policies=("crius",), source=None, **options):
    """Simulates each policy on the trace, as ``tessel-sched simulate`` does (same estimator calibration, same
    defaults): returns ``{policy: SimulationResult}``.

    ``trace``: a :class:`Trace` or a path; ``cluster``: a :class:`Cluster`, a path or ``"crius"``; ``profile``: a
    :class:`ProfileTable`, a path or None; ``source``: ``table``, ``estimator`` or ``table+estimator`` (default:
    table with a profile, else estimator); ``policies``: names from :func:`policy_names` or ``"all"``. Options (the
    CLI's): interval (300), max_rounds (0: until done), arena_compat, iteration_divisor (5 with arena_compat, else
    1), seed, node_mtbf_hours, node_repair_rounds, job_mtbf_hours, checkpoint_interval, start_latency,
    check_invariants, crius_search_depth, crius_upgrade_steps, crius_restart_trials. Ctrl-C stops it between
    rounds."""
    c = _cluster(cluster)
    t = trace if isinstance(trace, Trace) else load_trace(trace, c)
    p = _profile(profile)
    if isinstance(policies, str):
        policies = policy_names() if policies == "all" else [x for x in policies.split(",") if x]
    return {name: SimulationResult(_s.simulate(c, t, p, name, source, **options)) for name in policies}


def estimate(model, batch_size, gpu_type, hosts, per_host, stages, micro_batches=1, cluster="crius", profile=None):
    """Iteration time (comp, intra, inter, e2e seconds) and memory of one plan: ``stages`` = [(dp, tp), ...] per
    pipeline stage on ``hosts x per_host`` GPUs of ``gpu_type``; calibrated by ``profile`` when given."""
    return _s.estimate(_cluster(cluster), model, batch_size, gpu_type, hosts, per_host, list(stages), micro_batches,
                       _profile(profile))


def best(model, batch_size, gpu_type, hosts, per_host, strategy="greedy", cluster="crius", profile=None):
    """The best plan over the Cells of one allocation (every pipeline stage count) under one strategy
    (``minimal``, ``uniform`` or ``greedy``)."""
    return _s.best(_cluster(cluster), model, batch_size, gpu_type, hosts, per_host, strategy, _profile(profile))


def cells(model, batch_size, gpu_type, num_gpus, strategies="all", cluster="crius", profile=None):
    """The Cells of a job on ``num_gpus`` GPUs of ``gpu_type`` (every node layout times every pipeline stage count,
    as ``tessel-sched cells`` lists them) and, per Cell, the pruned plans of each strategy (``minimal``,
    ``uniform``, ``greedy``, a list of them or ``"all"``) with their estimates: a list of Cell dicts (see
    :func:`best`), each with ``plans`` [{stages, micro_batches, key, strategy, estimate}]."""
    if isinstance(strategies, str):
        strategies = ["minimal", "uniform", "greedy"] if strategies == "all" else [strategies]
    return _s.cells(_cluster(cluster), model, batch_size, gpu_type, num_gpus, list(strategies), _profile(profile))


def best_cell(model, batch_size, num_gpus, cluster="crius", gpu_type=None, profile=None,
              strategies=("greedy", "uniform")):
    """The fastest Cell for a job of ``num_gpus`` GPUs: over the GPU types (``gpu_type`` or every type with that
    many GPUs), their node layouts (per_host a power of two up to the node size) and the strategies (the scheduler
    takes the better of greedy and uniform), the plan with the least estimated iteration time. Returns its dict
    (see :func:`best`) with ``hosts``/``per_host``, or ``{"feasible": False, "why": ...}`` naming what was tried."""
    c = _cluster(cluster)
    p = _profile(profile)
    types = [gpu_type] if gpu_type is not None else [t["name"] for t in c.types]
    winner, tried = None, []
    for t in types:
        if c.type_gpus(t) < num_gpus:
            tried.append(f"{t}: the cluster has {c.type_gpus(t)} GPUs of this type")
            continue
        layouts = _s.node_layouts(c, t, num_gpus)
        if not layouts:
            tried.append(f"{t}: no node layout of {num_gpus} GPUs")
        for hosts, per_host in layouts:
            for strategy in strategies:
                r = _s.best(c, model, batch_size, t, hosts, per_host, strategy, p)
                if not r["feasible"]:
                    tried.append(f"{t} {hosts}x{per_host} {strategy}: {r['estimate']['why'] or 'no plan fits'}")
                    continue
                if winner is None or r["estimate"]["e2e"] < winner["estimate"]["e2e"]:
                    winner = r
    if winner is None:
        return {"feasible": False, "why": "; ".join(tried) or "no GPU type to try"}
    return winner
