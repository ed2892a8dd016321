"""Prints the table of benchmarks/results/2026-11-29_jax_versions/README.md from its logs."""

import json
import pathlib

HERE = pathlib.Path(__file__).parent
RUNS = ("jax0.10.2_seed0", "jax0.11.2_seed0", "jax0.12.0.1_seed0", "jax0.10.2_seed1",
        "jax0.10.2_seed2")


def losses(run):
  records = [json.loads(line) for line in (HERE / f"{run}.jsonl").read_text().splitlines()]
  train = {r["step"]: r["train_loss"] for r in records if "train_loss" in r}
  final = next(r for r in records if "final_valid_perplexity" in r)
  return records[0], train, final


_, reference, _ = losses(RUNS[0])
print("| run | jax, CPU | steps 1-10 loss | steps 11-20 loss (rel. diff.) | steps 41-50 loss | "
      "valid ppl after the epoch | test ppl |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for run in RUNS:
  start, train, final = losses(run)
  diff = abs(train[20] - reference[20]) / reference[20]
  print(f"| {run} | {start['versions']['jax']} on {start['cpu_model']} | {train[10]!r} | "
        f"{train[20]:.7f} ({diff:.1e}) | {train[50]:.4f} | "
        f"{final['final_valid_perplexity']:.2f} | {final['final_test_perplexity']:.2f} |")
