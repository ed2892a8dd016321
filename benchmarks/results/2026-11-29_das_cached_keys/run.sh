#!/usr/bin/env bash
# Training speed of the das table's attentive rows (configs/das.py: 1 x 300, batch 128, PTB)
# at two commits, alternating, each run stopped by SIGINT after SECONDS. By default: before
# (b4639a3: every key over the whole buffer at every step) and after (2d341c3: keys cached
# when written), 150 s, models lstmn das das_lstmn.
# Usage (from the repository root, PTB in the data root or ATTNLM_DATA_DIR, a quiet machine):
#   bash benchmarks/results/2026-11-29_das_cached_keys/run.sh OUT_DIR [BEFORE AFTER [SECONDS [MODEL ...]]]
#   python benchmarks/results/2026-11-29_das_cached_keys/compare.py OUT_DIR/metrics [BEFORE AFTER [MODEL ...]] > output.txt
set -u
mkdir -p "$1/metrics"; out=$(realpath "$1")
before=${2:-b4639a3}; after=${3:-2d341c3}; seconds=${4:-150}
models=("${@:5}"); [ ${#models[@]} -gt 0 ] || models=(lstmn das das_lstmn)
for commit in "$before" "$after"; do
  [ -d "$out/code_$commit" ] || git worktree add --detach "$out/code_$commit" "$commit" > /dev/null
done
for model in "${models[@]}"; do
  for commit in "$before" "$after"; do
    run=$out/${model}_$commit
    rm -rf "$run"
    (cd "$out/code_$commit" && timeout -s INT "$seconds" python -m attnlm_jax.main \
      --config=configs/das.py:model=$model --config.train.log_every_steps=10 \
      --config.train.save_every_steps=0 --workdir="$run" > "$run.log" 2>&1)
    echo "$model $commit exit $?"
    cp "$run/metrics.jsonl" "$out/metrics/${model}_$commit.jsonl"
  done
done
