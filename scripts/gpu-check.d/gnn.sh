# gnn part of scripts/gpu-check, sourced on a machine with a CUDA GPU after a CUDA build (variables: TESSEL_ROOT,
# TESSEL_BUILD, out). Runs the gnn GPU tests (every CUDA path against the host reference; they must run, not skip),
# then `tessel-gnn-bench --backend cuda` (adaptive vs cuSPARSE SpMM CSR_ALG2 vs Tessel's CSR and the other device
# kernels, each result checked) on generated community graphs, R-MAT and the real graphs at hand, and prints the
# summary table (also in $out/gnn-gpu/table.md). About 2 minutes on an H200; fails on any failed or skipped GPU
# test or wrong kernel result.
gnn_gpu_check() {
  local bin="$TESSEL_BUILD/benchmarks/gnn/tessel-gnn-bench" gen="$TESSEL_BUILD/datasets/gnn/tessel-gnn-data"
  local dir="${out:-$TESSEL_BUILD/gpu-check}/gnn-gpu" data="${TESSEL_DATA_DIR:-$TESSEL_ROOT/../shared/datasets}"
  mkdir -p "$dir"
  echo "== gnn: GPU tests and the register-spill check =="
  local log="$dir/ctest.log"
  ctest --test-dir "$TESSEL_BUILD" --output-on-failure --timeout 600 \
    -R '^(gnn\.(CudaSpmm|CudaSpills|DenseLayout)|benchmark\.gnn\.(generate|bench_cuda))$' 2>&1 | tee "$log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "gnn: GPU tests failed" >&2; return 1; }
  if grep -q -- "Skipped" "$log"; then
    echo "gnn: GPU tests were skipped: no CUDA device visible to them" >&2
    return 1
  fi
  echo "== gnn: tessel-gnn-bench --backend cuda =="
  local graphs=()
  [ -f "$dir/sbm-dense.h5" ] || "$gen" sbm --nodes 16384 --community 128 --p-in 0.5 --inter-degree 4 --features 0 \
    --out "$dir/sbm-dense.h5" > /dev/null
  [ -f "$dir/sbm-sparse.h5" ] || "$gen" sbm --nodes 65536 --community 64 --p-in 0.15 --inter-degree 4 --features 0 \
    --out "$dir/sbm-sparse.h5" > /dev/null
  [ -f "$dir/rmat.h5" ] || "$gen" rmat --scale 16 --edge-factor 8 --out "$dir/rmat.h5" > /dev/null
  graphs+=("$dir/sbm-dense.h5" "$dir/sbm-sparse.h5" "$dir/rmat.h5")
  if [ -d "$data/graphs/musae" ]; then
    [ -f "$dir/facebook.h5" ] || "$gen" csv --edges "$data/graphs/musae/facebook_edges.csv" --name facebook \
      --out "$dir/facebook.h5" > /dev/null
    graphs+=("$dir/facebook.h5")
  fi
  if [ -d "$data/graphs/planetoid" ] && /usr/bin/python3 -c "import h5py, numpy, scipy" 2> /dev/null; then
    for name in cora pubmed; do
      [ -f "$dir/$name.h5" ] || /usr/bin/python3 "$TESSEL_ROOT/datasets/gnn/planetoid_to_h5.py" \
        --dir "$data/graphs/planetoid/$name" --name "$name" --out "$dir/$name.h5" > /dev/null
      graphs+=("$dir/$name.h5")
    done
  fi
  local g base
  for g in "${graphs[@]}"; do
    base=$(basename "$g" .h5)
    echo "-- $base"
    "$bin" --backend cuda --data "$g" --features 16,64,256 --reps 20 --json "$dir/bench-$base.json" \
      | tee "$dir/bench-$base.log"
    [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "gnn: tessel-gnn-bench --backend cuda failed on $base" >&2; return 1; }
    if grep -q "skipped: no CUDA device" "$dir/bench-$base.log"; then
      echo "gnn: no CUDA device visible to tessel-gnn-bench" >&2
      return 1
    fi
  done
  echo "== gnn: Y = A X on the GPU, median ms (adaptive vs cuSPARSE vs CSR) =="
  /usr/bin/python3 "$TESSEL_ROOT/benchmarks/gnn/bench_table.py" "$dir"/bench-*.json | tee "$dir/table.md"
}
gnn_gpu_check
