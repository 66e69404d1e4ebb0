#!/usr/bin/env bash
# The moe benchmark sweep: the three models x M in {1024, 4096} at 2 and 4 ranks, link calibrated to a 47%
# communication share, then one table with both rank counts side by side.
#   benchmarks/moe/run_sweep.sh [OUT_DIR] [tessel-moe-bench options...]
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/common.sh"
out=${1:-$TESSEL_BUILD/bench-moe}
shift || true
mkdir -p "$out"
for w in 2 4; do
  echo "== $w ranks (load average: $(cut -d' ' -f1-3 /proc/loadavg)) =="
  # --bind-to none: the ranks and their communication threads share the cores; let the kernel place them.
  mpiexec --bind-to none -n "$w" "$TESSEL_BUILD/benchmarks/moe/tessel-moe-bench" --json "$out/moe_w$w.json" "$@"
done
/usr/bin/python3 "$TESSEL_ROOT/benchmarks/moe/report.py" "$out/moe_w2.json" "$out/moe_w4.json"
