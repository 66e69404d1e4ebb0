# Sourced by scripts/demo (variables: TESSEL_ROOT, TESSEL_BUILD, out).
echo "== tessel-moe: a Mixtral-shaped MoE layer (N, K scaled 1/16; E=8, topk=2; Zipf-skewed routing) on 2 ranks, =="
echo "== sequential vs pipelined vs comet on a link emulated at a 47% communication share, verified =="
"$TESSEL_BUILD/apps/moe/tessel-moe-gen" --model mixtral --scale 16 --tokens 2048 --imbalance 0.04 \
  --out "$out/moe-mixtral.h5"
mpiexec -n 2 "$TESSEL_BUILD/apps/moe/tessel-moe" "$out/moe-mixtral.h5" --comm-share 0.47 --iters 5 --verify \
  --json "$out/moe.json"
