#!/usr/bin/python3
"""The one table of scripts/gpu-check, from what it left in its output folder (argument): every GPU test with
pass / FAIL (gtest JSON in tests/, one file per program or per MPI rank; a test skipped on a GPU machine, or a
program that left no result, is a failure), then the moe benchmark (comet vs sequential vs pipelined on virtual
ranks) and the gnn benchmark (adaptive vs cuSPARSE vs Tessel's CSR), each row with its error against the host
reference. Exits 1 when any row failed."""
import glob
import json
import os
import re
import sys


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def test_rows(out):
    """(program, test, verdict, note) for every test of every program that ran; programs without results too."""
    rows = []
    logs = sorted(glob.glob(os.path.join(out, "tests", "*.log")))
    for log in logs:
        program = os.path.basename(log)[:-4]
        files = sorted(glob.glob(os.path.join(out, "tests", program + ".json")) +
                       glob.glob(os.path.join(out, "tests", program + ".rank*.json")))
        docs = [d for d in (load(f) for f in files) if d is not None]
        if not docs:
            with open(log, errors="replace") as f:
                tail = [line.strip() for line in f.readlines()[-3:] if line.strip()]
            rows.append((program, "(whole program)", "FAIL",
                         "no result: crashed or timed out; " + (tail[-1] if tail else "empty log")))
            continue
        verdicts = {}
        for doc in docs:
            for suite in doc.get("testsuites", []):
                for t in suite.get("testsuite", []):
                    name = suite["name"] + "." + t["name"]
                    if t.get("failures"):
                        first = t["failures"][0].get("failure", "").splitlines()
                        v = ("FAIL", first[1] if len(first) > 1 else (first[0] if first else ""))
                    elif t.get("result") == "SKIPPED":
                        v = ("FAIL", "skipped on a GPU machine")
                    elif t.get("status") == "RUN":
                        v = ("pass", t.get("time", ""))
                    else:
                        continue
                    # Every rank must pass: a failure on any rank is the verdict.
                    if name not in verdicts or v[0] == "FAIL":
                        verdicts[name] = v
        for name, (verdict, note) in sorted(verdicts.items()):
            rows.append((program, name, verdict, note[:100]))
    return rows


def moe_rows(out):
    rows = []
    for path in sorted(glob.glob(os.path.join(out, "moe-*.json"))):
        doc = load(path)
        if not doc or "points" not in doc:
            rows.append(("FAIL", os.path.basename(path), "no results"))
            continue
        for p in doc["points"]:
            seq, pipe, comet = p["sequential_ms"], p["pipelined_ms"], p["comet_ms"]
            rows.append(("pass" if p["ok"] else "FAIL", f"{p['model']} M={p['M']} W={doc['virtual_ranks']} "
                         f"{doc['dtype']}", f"{seq:.3f} | {pipe:.3f} (chunks {p['pipelined_chunks']}) | {comet:.3f} | "
                         f"{seq / comet:.2f}x | {pipe / comet:.2f}x | {p['err_sequential']:.1e} / "
                         f"{p['err_pipelined']:.1e} / {p['err_comet']:.1e}"))
    return rows


def gnn_rows(out):
    rows = []
    for path in sorted(glob.glob(os.path.join(out, "gnn-*.json"))):
        doc = load(path)
        name = os.path.basename(path)[4:-5]
        if not doc or "results" not in doc:
            rows.append(("FAIL", name, (doc or {}).get("skipped", "no results")))
            continue
        for r in doc["results"]:
            ms, err, notes = r["median_ms"], r.get("max_err_over_abs_a_abs_x", {}), r.get("notes", {})
            wrong = [k for k, v in notes.items() if "WRONG" in v]

            def cell(k):
                return f"{ms[k]:.4f}" if k in ms else "-"

            def ratio(k):
                return f"{ms[k] / ms['adaptive']:.2f}x" if k in ms and "adaptive" in ms else "-"

            worst = max((v for k, v in err.items()), default=float("nan"))
            rows.append(("FAIL" if wrong or "adaptive" not in ms else "pass", f"{name} F={r['features']}",
                         f"{cell('adaptive')} | {cell('cusparse')} | {cell('csr')} | {ratio('cusparse')} | "
                         f"{ratio('csr')} | {worst:.1e}" + (f" | WRONG: {', '.join(wrong)}" if wrong else "")))
    return rows


def main(out):
    failed = False
    versions = os.path.join(out, "versions.txt")
    if os.path.exists(versions):
        with open(versions) as f:
            for line in f:
                print(f"- {line.strip()}")
    counts = []
    print("\n| program | GPU test | result | note |\n|---|---|---|---|")
    tests = test_rows(out)
    for program, name, verdict, note in tests:
        failed |= verdict != "pass"
        print(f"| {program} | {name} | {verdict} | {note} |")
    if not tests:
        failed = True
        print("| - | no GPU test ran | FAIL | |")
    for header, rows, none in (
            ("| moe point | result | sequential ms | pipelined ms | comet ms | seq/comet | pipe/comet | "
             "error vs reference (seq / pipe / comet) |", moe_rows(out), "no moe benchmark ran"),
            ("| gnn graph | result | adaptive ms | cuSPARSE ms | CSR ms | cuSPARSE/adaptive | CSR/adaptive | "
             "largest error / (abs(A) abs(X)) |", gnn_rows(out), "no gnn benchmark ran")):
        print("\n" + header + "\n" + "|---" * (header.count("|") - 1) + "|")
        for verdict, what, cells in rows:
            failed |= verdict != "pass"
            print(f"| {what} | {verdict} | {cells} |")
        if not rows:
            failed = True
            print(f"| {none} | FAIL | |")
        counts.append(len(rows))
    phases = os.path.join(out, "phases.txt")
    if os.path.exists(phases):
        with open(phases) as f:
            timed_out = [line.strip() for line in f if re.search(r"exit (124|137)$|no time left", line)]
        for line in timed_out:
            failed = True
            print(f"\ntimed out: {line}")
    print(f"\n{'FAIL' if failed else 'pass'}: {len(tests)} GPU tests, {counts[0]} moe and {counts[1]} gnn benchmark rows")
    return 1 if failed else 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: summary.py OUTPUT_FOLDER")
    sys.exit(main(sys.argv[1]))
