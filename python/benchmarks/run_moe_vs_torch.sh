#!/usr/bin/env bash
# tessel.torch.moe.MoELayer vs a plain PyTorch expert-parallel MoE layer (moe_vs_torch.py) on 2 ranks: RUNS
# processes (mpiexec jobs), then the table (moe_vs_torch_table.py). Each job takes the CPU lock LOCK when set, so
# that nothing else runs meanwhile.
#   python/benchmarks/run_moe_vs_torch.sh BUILD_DIR OUT_DIR [moe_vs_torch.py options]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=$1 out=$2
shift 2
runs=${RUNS:-3}
py=$build/python-venv/bin/python
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 \
  OMPI_MCA_btl_vader_single_copy_mechanism=none
mkdir -p "$out"
for run in $(seq 1 "$runs"); do
  PYTHONPATH=$build/python ${LOCK:+flock "$LOCK"} mpiexec -n 2 "$py" "$root/python/benchmarks/moe_vs_torch.py" \
    --port $((${PORT_BASE:-29500} + run)) --json "$out/moe-$run.json" "$@"
done
"$py" "$root/python/benchmarks/moe_vs_torch_table.py" "$out"
