#!/usr/bin/env bash
# One training process on both cores against two one-thread processes side by side (one per
# core): 2 x 650 `none` on Penn Treebank, 200 steps each, tokens/s as the loop logs it every
# 50 steps. Run from the repository root with the lane paused; prints the log lines.
#   bash benchmarks/results/2026-11-29_lane_threads/run.sh > benchmarks/results/2026-11-29_lane_threads/output.txt
out=$(mktemp -d)
run() {  # run NAME [prefix...]: starts a training run in the background, prints its pid
  local name=$1; shift
  "$@" python -m attnlm_jax.main --config=configs/ptb.py:score=none --workdir=$out/$name \
     --config.train.log_every_steps=50 --config.train.save_every_steps=100000 \
     > $out/$name.log 2>&1 &
  echo $!
}
wait_steps() { while ! grep -q "step 200 " $out/$1.log; do sleep 5; done; }
lscpu | grep "Model name"
p=$(run both_cores); wait_steps both_cores; kill $p
export XLA_FLAGS="--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
p0=$(run core0 taskset -c 0); p1=$(run core1 taskset -c 1)
wait_steps core0; wait_steps core1; kill $p0 $p1
for name in both_cores core0 core1; do
  grep -h "step 1[05]0 \|step 200 " $out/$name.log | sed "s/^/$name: /"
done
