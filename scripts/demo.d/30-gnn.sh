# Sourced by scripts/demo (variables: TESSEL_ROOT, TESSEL_BUILD, out).
echo "== tessel-gnn: GCN on a generated community graph (adaptive aggregation), then Y = A X per kernel =="
export OPENBLAS_NUM_THREADS=1
"$TESSEL_BUILD/apps/gnn/tessel-gnn-data" sbm --nodes 8000 --community 100 --p-in 0.2 --inter-degree 2 \
  --classes 8 --features 32 --signal 0.5 --out "$out/gnn-sbm.h5"
"$TESSEL_BUILD/apps/gnn/tessel-gnn" train --data "$out/gnn-sbm.h5" --model gcn --kernel adaptive --epochs 100 \
  --quiet --json "$out/gnn-train.json"
"$TESSEL_BUILD/benchmarks/gnn/tessel-gnn-bench" --data "$out/gnn-sbm.h5" --features 64 --reps 5 \
  --kernels csr,coo,kk,adaptive --json "$out/gnn-bench.json" | grep -E "^F|speedup|best|  (csr|coo|kk|adaptive) "
