#!/usr/bin/env bash
# GCN training against PyTorch Geometric's GCN, one thread each: 200 epochs of Kipf and Welling's setup on Cora,
# CiteSeer and PubMed, RUNS times (seeds 1..RUNS) with Tessel and PyG interleaved; prints time per epoch and test
# accuracy (medians over the runs). Not part of CI: PyG comes from PyPI into BUILD_DIR/peers-venv (benchmarks/gnn/peers/).
#
#   benchmarks/gnn/run_training.sh [BUILD_DIR] [OUT_DIR]     (data from TESSEL_DATA_DIR, default ../shared/datasets)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${1:-$root/build/default}
out=${2:-$build/gnn-training}
data=${TESSEL_DATA_DIR:-$root/../shared/datasets}
runs=${RUNS:-3}
epochs=${EPOCHS:-200}
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
mkdir -p "$out"
venv=$build/peers-venv
[[ -x $venv/bin/python ]] || "$root/benchmarks/gnn/peers/setup-venv.sh" "$venv"
sets=()
for name in cora citeseer pubmed; do
  [ -f "$out/$name.h5" ] || /usr/bin/python3 "$root/datasets/gnn/planetoid_to_h5.py" --dir "$data/graphs/planetoid/$name" \
    --name "$name" --out "$out/$name.h5"
  sets+=("$out/$name.h5")
done
for r in $(seq 1 "$runs"); do
  for g in "${sets[@]}"; do
    base=$(basename "$g" .h5)
    # All epochs, as PyG's example (no early stopping).
    "$build/apps/gnn/tessel-gnn" train --data "$g" --model gcn --epochs "$epochs" --patience 0 --seed "$r" --quiet \
      --json "$out/tessel-$base-run$r.json" >/dev/null
  done
  # PyG's GCNConv as it comes (with a bias), and without the bias: Kipf and Welling's model, as Tessel's.
  for bias in on off; do
    "$venv/bin/python" "$root/benchmarks/gnn/peers/peers.py" train --data "${sets[@]}" --epochs "$epochs" --seed "$r" \
      --threads 1 --bias "$bias" --json "$out/pyg-bias-$bias-run$r.json"
  done
done
/usr/bin/python3 "$root/benchmarks/gnn/bench_table.py" --training "$out"
