"""Training tokens/s of each run of run.sh (`compare.py METRICS_DIR [BEFORE AFTER [MODEL ...]]`;
by default b4639a3 against 2d341c3 for lstmn, das and das_lstmn) (the loop's own metrics.jsonl, each log of 10
steps from step 30 on: compiling and warm-up excluded) and the speed-up per model. Both runs
of a model train the same batches in the same order (same seed), so each 10-step interval
that both reached is compared with itself: the paired ratios' median and range."""

import json
import pathlib
import statistics
import sys

DEFAULT_COMMITS, DEFAULT_MODELS = ("b4639a3", "2d341c3"), ("lstmn", "das", "das_lstmn")


def rates(log: pathlib.Path) -> dict[int, float]:
  """Step -> tokens/s of the 10 steps up to it, from step 30 on."""
  records = [json.loads(line) for line in log.read_text().splitlines()]
  return {r["step"]: r["tokens_per_second"] for r in records
          if "tokens_per_second" in r and r["step"] >= 30}


def main(out: pathlib.Path, commits=DEFAULT_COMMITS, models=DEFAULT_MODELS) -> None:
  cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
             if line.startswith("model name"))
  print(f"cpu: {cpu}")
  before, after = commits
  print(f"| model | before ({before}) tokens/s | after ({after}) tokens/s "
        "| after / before, same intervals: median (range, intervals) |")
  print("| --- | ---: | ---: | ---: |")
  for model in models:
    old, new = (rates(out / f"{model}_{commit}.jsonl") for commit in commits)
    paired = [new[step] / old[step] for step in sorted(old.keys() & new.keys())]
    print(f"| {model} | {statistics.median(old.values()):,.1f} "
          f"| {statistics.median(new.values()):,.1f} | {statistics.median(paired):.2f} "
          f"({min(paired):.2f}-{max(paired):.2f}, {len(paired)}) |")


if __name__ == "__main__":
  args = sys.argv[1:]
  main(pathlib.Path(args[0]), tuple(args[1:3]) or DEFAULT_COMMITS, tuple(args[3:]) or DEFAULT_MODELS)
