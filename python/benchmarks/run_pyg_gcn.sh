#!/usr/bin/env bash
# PyG's GCN with PyG's GCNConv and with Tessel's, interleaved: every data set at one and two threads, seeds 1..RUNS
# (one process each), then the table (pyg_gcn_table.py). Each process takes the CPU lock LOCK when set, so that
# nothing else runs meanwhile.
#   python/benchmarks/run_pyg_gcn.sh BUILD_DIR OUT_DIR     (data: TESSEL_DATA_DIR, default ../shared/datasets)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=$1 out=$2
data=${TESSEL_DATA_DIR:-$root/../shared/datasets}
runs=${RUNS:-3}
py=$build/python-venv/bin/python
mkdir -p "$out"
for name in cora citeseer pubmed; do
  [ -f "$out/$name.h5" ] || /usr/bin/python3 "$root/datasets/gnn/planetoid_to_h5.py" --dir "$data/graphs/planetoid/$name" \
    --name "$name" --out "$out/$name.h5" >/dev/null
done
m=$data/graphs/musae gen=$build/apps/gnn/tessel-gnn-data
[ -f "$out/facebook.h5" ] || "$gen" csv --edges "$m/facebook_edges.csv" --targets "$m/facebook_target.csv" \
  --id-column id --target-column page_type --name facebook --out "$out/facebook.h5" >/dev/null
[ -f "$out/engb.h5" ] || "$gen" csv --edges "$m/ENGB_edges.csv" --targets "$m/ENGB_target.csv" --id-column new_id \
  --target-column mature --name twitch-engb --out "$out/engb.h5" >/dev/null
sets=("$out"/{cora,citeseer,pubmed,facebook,engb}.h5)
for seed in $(seq 1 "$runs"); do
  for threads in 1 2; do
    for layer in pyg tessel; do
      PYTHONPATH=$build/python ${LOCK:+flock "$LOCK"} "$py" "$root/python/benchmarks/pyg_gcn.py" --data "${sets[@]}" --layer "$layer" \
        --threads "$threads" --seed "$seed" --json "$out/gcn-$layer-t$threads-s$seed.json"
    done
  done
done
"$py" "$root/python/benchmarks/pyg_gcn_table.py" "$out"
