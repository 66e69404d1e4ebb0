# Shared by run_bench.sh and run_threads.sh (sourced): converts the real graphs at hand and generates the
# community and R-MAT graphs into $out (once), and lists them in the array `graphs`.
# Needs: root, out, data, gen (tessel-gnn-data), py.
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

