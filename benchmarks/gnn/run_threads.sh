#!/usr/bin/env bash
# Thread scaling of the host kernels on an OpenMP Kokkos (the kokkos4 preset): `tessel-gnn bench` at
# OMP_NUM_THREADS=1 and 2, interleaved, RUNS times each, on the real and generated graphs of >= 88 k entries; then
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
gnn="$build/apps/gnn/tessel-gnn"
gen="$build/datasets/gnn/tessel-gnn-data"
py=/usr/bin/python3

graphs=()
if [ -d "$data/graphs/planetoid/pubmed" ]; then
  [ -f "$out/pubmed.h5" ] || $py "$root/datasets/gnn/planetoid_to_h5.py" --dir "$data/graphs/planetoid/pubmed" \
    --name pubmed --out "$out/pubmed.h5"
  graphs+=("$out/pubmed.h5")
fi
if [ -d "$data/graphs/musae" ]; then
  m="$data/graphs/musae"
  [ -f "$out/facebook.h5" ] || "$gen" csv --edges "$m/facebook_edges.csv" --targets "$m/facebook_target.csv" \
    --id-column id --target-column page_type --name facebook --out "$out/facebook.h5"
  graphs+=("$out/facebook.h5")
fi
[ -f "$out/sbm-sparse.h5" ] || "$gen" sbm --nodes 65536 --community 64 --p-in 0.15 --inter-degree 4 --features 0 \
  --out "$out/sbm-sparse.h5"
[ -f "$out/rmat.h5" ] || "$gen" rmat --scale 16 --edge-factor 8 --out "$out/rmat.h5"
graphs+=("$out/sbm-sparse.h5" "$out/rmat.h5")

for run in $(seq 1 "$runs"); do
  for g in "${graphs[@]}"; do
    base=$(basename "$g" .h5)
    for t in $threads; do
      echo "== run $run, $base, $t thread(s) =="
      OMP_NUM_THREADS=$t "$gnn" bench --data "$g" --features "$features" --reps "$reps" \
        --json "$out/threads-$base-t$t-r$run.json" > "$out/threads-$base-t$t-r$run.log"
    done
  done
done
$py "$root/benchmarks/gnn/threads_table.py" "$out"
