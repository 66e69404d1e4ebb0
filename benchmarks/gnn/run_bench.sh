#!/usr/bin/env bash
# Runs `tessel-gnn-bench` over the real graphs at hand and generated community graphs, one core (Serial Kokkos,
# OPENBLAS_NUM_THREADS=1), and prints the summary table of gnn/README.md.
#
#   benchmarks/gnn/run_bench.sh [BUILD_DIR] [OUT_DIR]      (data from TESSEL_DATA_DIR, default ../shared/datasets)
# Several runs into several OUT_DIRs combine with benchmarks/gnn/bench_table.py --runs DIR1 DIR2 ... (medians).
# PEERS=1 also times the peers (scipy.sparse, torch.sparse.mm, PyTorch Geometric; benchmarks/gnn/peers/) on each
# graph right after Tessel, one thread each, creating their virtual environment under BUILD_DIR on first use.
# The summary table then has their columns, and OUT_DIR/roofline.png the roofline plot.
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
gen="$build/apps/gnn/tessel-gnn-data"
py=/usr/bin/python3

source "$root/benchmarks/gnn/graphs.sh"

venv=$build/peers-venv
if [[ ${PEERS:-0} == 1 && ! -x $venv/bin/python ]]; then
  "$root/benchmarks/gnn/peers/setup-venv.sh" "$venv"
fi
for g in "${graphs[@]}"; do
  base=$(basename "$g" .h5)
  echo "== $base =="
  "$bench" --data "$g" --features "$features" --reps "$reps" --json "$out/bench-$base.json" | tee "$out/bench-$base.log"
  if [[ ${PEERS:-0} == 1 ]]; then
    "$venv/bin/python" "$root/benchmarks/gnn/peers/peers.py" spmm --data "$g" --features "$features" --reps "$reps" \
      --threads 1 --json "$out/peers-$base.json"
  fi
done
$py "$root/benchmarks/gnn/bench_table.py" --plot "$out/roofline.png" "$out"/bench-*.json
