# Sourced by scripts/demo (variables: TESSEL_ROOT, TESSEL_BUILD, out).
echo "== tessel-comm-bench: allreduce and alltoallv over MPI, 2 ranks (nccl-tests format) =="
mpiexec -n 2 "$TESSEL_BUILD/benchmarks/comm/tessel-comm-bench" -b 1K -e 16M -f 4 -w 3 -n 20 -J "$out/comm.json"
