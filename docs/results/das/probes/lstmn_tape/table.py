"""The README's table: valid perplexity after each of the first three epochs, from the logs.

usage: python table.py   (from this directory)
"""

import json

RUNS = {"`lstm` (no tape)": "../../lstm/metrics.jsonl",
        "`lstmn`, 35 slots (`das_recipe`'s `lstmn_tape35`)":
            "../../../das_recipe/lstmn_tape35/metrics.jsonl",
        "`lstmn`, 8 slots": "tape8/metrics.jsonl",
        "`lstmn`, 2 slots": "tape2/metrics.jsonl",
        "`lstm`, one sentence per row (`das_recipe`'s `sentence_untied`)":
            "../../../das_recipe/sentence_untied/metrics.jsonl",
        "`lstmn`, one sentence per row (tape: the sentence so far)": "sentence/metrics.jsonl"}


def valid_by_epoch(path):
  records = [json.loads(line) for line in open(path)]
  return {r["epoch"]: r["valid_perplexity"] for r in records if "valid_perplexity" in r}


print("| model, tape | epoch 1 | epoch 2 | epoch 3 |")
print("| --- | ---: | ---: | ---: |")
for name, path in RUNS.items():
  valid = valid_by_epoch(path)
  print(f"| {name} | " + " | ".join(f"{valid[epoch]:.1f}" for epoch in (1, 2, 3)) + " |")
