#!/usr/bin/env bash
# Thread scaling of the host kernels on an OpenMP Kokkos (the kokkos4 preset): `tessel-gnn-bench` at
# OMP_NUM_THREADS=1 and 2 (THREADS), interleaved, RUNS times each, on the graphs of run_bench.sh (graphs.sh); then
# the table of medians and speedups (threads_table.py). OpenBLAS keeps one thread (dense runs its GEMM).
#
#   benchmarks/gnn/run_threads.sh [BUILD_DIR] [OUT_DIR]    (default build/kokkos4; data as run_bench.sh)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${1:-$root/build/kokkos4}
out=${2:-$build/gnn-threads}
data=${TESSEL_DATA_DIR:-$root/../shared/datasets}
runs=${RUNS:-3}
reps=${REPS:-15}
features=${FEATURES:-16,64,256}
threads=${THREADS:-1 2}
export OPENBLAS_NUM_THREADS=1 OMP_PROC_BIND=false
mkdir -p "$out"
bench="$build/benchmarks/gnn/tessel-gnn-bench"
gen="$build/apps/gnn/tessel-gnn-data"
py=/usr/bin/python3

source "$root/benchmarks/gnn/graphs.sh"

for run in $(seq 1 "$runs"); do
  for g in "${graphs[@]}"; do
    base=$(basename "$g" .h5)
    for t in $threads; do
      echo "== run $run, $base, $t thread(s) =="
      OMP_NUM_THREADS=$t "$bench" --data "$g" --features "$features" --reps "$reps" \
        --json "$out/threads-$base-t$t-r$run.json" > "$out/threads-$base-t$t-r$run.log"
    done
  done
done
$py "$root/benchmarks/gnn/threads_table.py" "$out"
