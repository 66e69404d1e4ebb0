#!/usr/bin/env bash
# Runs `tessel-gnn-bench` over the real graphs at hand and generated community graphs, one core (Serial Kokkos,
# OPENBLAS_NUM_THREADS=1), and prints the summary table of gnn/README.md.
#
#   benchmarks/gnn/run_bench.sh [BUILD_DIR] [OUT_DIR]      (data from TESSEL_DATA_DIR, default ../shared/datasets)
# Several runs into several OUT_DIRs combine with benchmarks/gnn/bench_table.py --runs DIR1 DIR2 ... (medians).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${1:-$root/build/default}
out=${2:-$build/gnn-bench}
data=${TESSEL_DATA_DIR:-$root/../shared/datasets}
reps=${REPS:-15}
features=${FEATURES:-16,64,256}
export OPENBLAS_NUM_THREADS=1
mkdir -p "$out"
bench="$build/benchmarks/gnn/tessel-gnn-bench"
gen="$build/datasets/gnn/tessel-gnn-data"
py=/usr/bin/python3

source "$root/benchmarks/gnn/graphs.sh"

for g in "${graphs[@]}"; do
  base=$(basename "$g" .h5)
  echo "== $base =="
  "$bench" --data "$g" --features "$features" --reps "$reps" --json "$out/bench-$base.json" | tee "$out/bench-$base.log"
done
$py "$root/benchmarks/gnn/bench_table.py" "$out"/bench-*.json
