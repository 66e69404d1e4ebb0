#!/usr/bin/env bash
# Runs `tessel-gnn bench` over the real graphs at hand and generated community graphs, one core (Serial Kokkos,
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
gnn="$build/apps/gnn/tessel-gnn"
gen="$build/datasets/gnn/tessel-gnn-data"
py=/usr/bin/python3

graphs=()
if [ -d "$data/graphs/planetoid" ]; then
  for name in cora citeseer pubmed; do
    [ -f "$out/$name.h5" ] || $py "$root/datasets/gnn/planetoid_to_h5.py" --dir "$data/graphs/planetoid/$name" \
      --name "$name" --out "$out/$name.h5"
    graphs+=("$out/$name.h5")
  done
fi
if [ -d "$data/graphs/musae" ]; then
  m="$data/graphs/musae"
  [ -f "$out/facebook.h5" ] || "$gen" csv --edges "$m/facebook_edges.csv" --targets "$m/facebook_target.csv" \
    --id-column id --target-column page_type --name facebook --out "$out/facebook.h5"
  [ -f "$out/chameleon.h5" ] || "$gen" csv --edges "$m/chameleon_edges.csv" --name chameleon --out "$out/chameleon.h5"
  [ -f "$out/engb.h5" ] || "$gen" csv --edges "$m/ENGB_edges.csv" --targets "$m/ENGB_target.csv" --id-column new_id \
    --target-column mature --name twitch-engb --out "$out/engb.h5"
  graphs+=("$out/facebook.h5" "$out/chameleon.h5" "$out/engb.h5")
fi
# Generated: planted communities (dense and sparse ones) and R-MAT (no communities).
[ -f "$out/sbm-dense.h5" ] || "$gen" sbm --nodes 16384 --community 128 --p-in 0.5 --inter-degree 4 --features 0 \
  --out "$out/sbm-dense.h5"
[ -f "$out/sbm-sparse.h5" ] || "$gen" sbm --nodes 65536 --community 64 --p-in 0.15 --inter-degree 4 --features 0 \
  --out "$out/sbm-sparse.h5"
[ -f "$out/rmat.h5" ] || "$gen" rmat --scale 16 --edge-factor 8 --out "$out/rmat.h5"
graphs+=("$out/sbm-dense.h5" "$out/sbm-sparse.h5" "$out/rmat.h5")

for g in "${graphs[@]}"; do
  base=$(basename "$g" .h5)
  echo "== $base =="
  "$gnn" bench --data "$g" --features "$features" --reps "$reps" --json "$out/bench-$base.json" | tee "$out/bench-$base.log"
done
$py "$root/benchmarks/gnn/bench_table.py" "$out"/bench-*.json
