# Sourced by scripts/demo (variables: TESSEL_ROOT, TESSEL_BUILD, out).
# A synthetic trace (Crius's job mix, 200 jobs at 40 per hour) on a 64-GPU, four-type cluster; Crius and the four
# baselines side by side, run until every job completed or was rejected; throughputs from the analytic estimator.
echo "== tessel-sched: Crius vs FCFS, ElasticFlow, Gavel, Sia on a synthetic trace (64 GPUs, 4 types) =="
"$TESSEL_BUILD/apps/sched/tessel-sched-data" synth "$out/sched_trace.h5" \
  --cluster "$TESSEL_ROOT/datasets/sched/clusters/hetero_64.csv" --jobs 200 --rate 40 --median-hours 1 --seed 1
"$TESSEL_BUILD/apps/sched/tessel-sched" simulate --trace "$out/sched_trace.h5" \
  --cluster "$TESSEL_ROOT/datasets/sched/clusters/hetero_64.csv" --policy all --parallel 2 --json "$out/sched.json"
echo "plots: /usr/bin/python3 $TESSEL_ROOT/apps/sched/plot_sched.py $out/sched.json --out $out"
