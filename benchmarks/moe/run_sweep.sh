#!/usr/bin/env bash
# The moe benchmark sweep: the three models x M in {1024, 4096} at 2 and 4 ranks, link calibrated to a 47%
# communication share, RUNS times each (default 1), then one table with both rank counts side by side (the
# median over the runs, with their range, when RUNS > 1).
#   [RUNS=3] benchmarks/moe/run_sweep.sh [OUT_DIR] [tessel-moe-bench options...]
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/common.sh"
out=${1:-$TESSEL_BUILD/bench-moe}
shift || true
runs=${RUNS:-1}
mkdir -p "$out"
files=()
for w in 2 4; do
  for r in $(seq 1 "$runs"); do
    echo "== $w ranks, run $r of $runs (load average: $(cut -d' ' -f1-3 /proc/loadavg)) =="
    # --bind-to none: the ranks and their communication threads share the cores; let the kernel place them.
    mpiexec --bind-to none -n "$w" "$TESSEL_BUILD/benchmarks/moe/tessel-moe-bench" --json "$out/moe_w${w}_r$r.json" "$@"
    files+=("$out/moe_w${w}_r$r.json")
  done
done
/usr/bin/python3 "$TESSEL_ROOT/benchmarks/moe/report.py" "${files[@]}"
