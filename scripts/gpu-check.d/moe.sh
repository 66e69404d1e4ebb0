# moe part of scripts/gpu-check, sourced on a machine with a CUDA GPU after a CUDA build (variables: TESSEL_ROOT,
# TESSEL_BUILD, out; function record). Runs the moe GPU tests (every CUDA schedule against the host reference in the
# one-process multi-rank mode, and the NCCL symmetric-window path on one rank; they must run, not skip; the 2- and
# 4-rank NCCL tests need one GPU per rank and run under `ctest -L gpu` where there are), the host emulation of the
# device work lists and the register-spill check, then `tessel-moe-bench --backend cuda` (comet vs sequential vs pipelined on 4 virtual ranks,
# CUDA-event timing, every result checked) and prints its table (also in $out/moe-gpu/table.md). Budget: a few
# minutes on an H200; fails on any failed or skipped GPU test or wrong benchmark result.
moe_gpu_check() {
  local bin="$TESSEL_BUILD/benchmarks/moe/tessel-moe-bench"
  local dir="${out:-$TESSEL_BUILD/gpu-check}/moe-gpu"
  mkdir -p "$dir"
  echo "== moe: GPU tests, work-list emulation and the register-spill check =="
  local log="$dir/ctest.log"
  ctest --test-dir "$TESSEL_BUILD" --output-on-failure --timeout 600 \
    -R '^(moe\.(CudaMoe|CudaWorkPlan|CudaSpills|Tuning|CudaNcclMoe\.mpi_1)|benchmark\.moe\.cuda_smoke)$' 2>&1 | tee "$log"
  if [ "${PIPESTATUS[0]}" -ne 0 ]; then
    record "moe gpu tests" "FAIL" "see $log"
    return 1
  fi
  if grep -q -- "Skipped" "$log"; then
    record "moe gpu tests" "FAIL" "skipped: no CUDA device visible to them"
    return 1
  fi
  record "moe gpu tests" "pass" "$(grep -E 'tests passed' "$log")"
  grep -E "comet_|final_sum_kernel|topk_reduce_kernel" "$log" | sed 's/^[0-9]*: *//' > "$dir/ptxas.txt" || true

  echo "== moe: tessel-moe-bench --backend cuda (4 virtual ranks, bfloat16 and float32) =="
  local status=0 dtype
  for dtype in bfloat16 float32; do
    "$bin" --backend cuda --virtual-ranks 4 --models mixtral,qwen2,phi35 --tokens 2048,8192 --scale 4 \
      --dtype "$dtype" --iters 10 --warmup 2 --json "$dir/bench-$dtype.json" | tee "$dir/bench-$dtype.log"
    if [ "${PIPESTATUS[0]}" -ne 0 ]; then
      record "moe bench $dtype" "FAIL" "wrong result or error (see $dir/bench-$dtype.log)"
      status=1
      continue
    fi
    if grep -q "skipped: no CUDA device" "$dir/bench-$dtype.log"; then
      record "moe bench $dtype" "FAIL" "no CUDA device visible to tessel-moe-bench"
      status=1
      continue
    fi
    # One summary line per point: model M seq/comet pipe/comet.
    record "moe bench $dtype" "pass" "$(grep -E '^\| [a-z]' "$dir/bench-$dtype.log" |
      awk -F'|' '{printf "%s M=%s comet %sms seq/comet %s pipe/comet %s;", $2, $3, $8, $9, $10}' | tr -s ' ')"
  done
  grep -h -E '^\|' "$dir"/bench-*.log > "$dir/table.md" || true
  echo "== moe: device time per layer forward, median ms (table also in $dir/table.md) =="
  cat "$dir/table.md"
  return $status
}
moe_gpu_check
