#!/usr/bin/env bash
# configs/demo.py at learning rate 1.0 (its rate until 2026-11-29) and 0.5 (since), seeds 0
# and 1: the highest loss of the first 300 steps (logged every 10), validation perplexity after
# each epoch, and the final test perplexity. From the repository root:
#   bash benchmarks/results/2026-11-29_demo_learning_rate/run.sh > benchmarks/results/2026-11-29_demo_learning_rate/output.txt
set -euo pipefail
out=$(mktemp -d)
echo "# $(lscpu | grep 'Model name' | sed 's/  */ /g'), $(nproc) cores, $(date -u +%F), commit $(git rev-parse --short HEAD)"
for lr in 1.0 0.5; do
  for seed in 0 1; do
    python -m attnlm_jax.main --config=configs/demo.py --config.train.learning_rate=$lr \
      --config.seed=$seed --config.train.log_every_steps=10 --workdir=$out/lr${lr}_seed$seed \
      > $out/lr${lr}_seed$seed.json 2> /dev/null
    python - $out/lr${lr}_seed$seed $lr $seed <<'PY'
import json, pathlib, sys
workdir, lr, seed = sys.argv[1:]
records = [json.loads(line) for line in open(pathlib.Path(workdir) / "metrics.jsonl")]
losses = [r["train_loss"] for r in records if "train_loss" in r and r["step"] <= 300]
valid = [round(r["valid_perplexity"], 2) for r in records if "epoch_train_loss" in r]
final = json.loads(pathlib.Path(workdir + ".json").read_text().splitlines()[-1])
print(json.dumps({"learning_rate": float(lr), "seed": int(seed),
                  "max_loss_steps_1_300": round(max(losses), 3),
                  "valid_perplexity_per_epoch": valid,
                  "test_perplexity": round(final["test_perplexity"], 3)}))
PY
  done
done
