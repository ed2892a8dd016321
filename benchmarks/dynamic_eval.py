"""Passes of dynamic evaluation over the validation split, its windows padded in time to
different multiples (`dynamic_eval.WINDOW_TIME_MULTIPLE`).

    python -m benchmarks.dynamic_eval --config=configs/ptb.py:score=single \
        [--multiples=16,4] [--rule=sgd] [--windows=0] [--passes=2] [--rounds=1]

Dynamic evaluation reads a split window by window (one sentence each, as the test-time pages
run it), a gradient step after every window, so a pass is thousands of sequential steps that
each compute their window's padding. Padding to a small multiple wastes less of each step
but compiles the step for more widths, once per evaluator: a grid search makes all its
passes with one. This times passes as a search makes them: for each multiple a fresh
`DynamicEvaluator` over the model's initial parameters (the speed of a step does not depend
on the weights) reads the first `--windows` windows of `valid` (0: all of them) `--passes`
times, the first compiling, the multiples alternating for `--rounds` rounds. It prints one
JSON line: per multiple the seconds of the first pass and of a later one (medians; every
pass of every round beside them), what a search of SEARCH_PASSES passes takes from them, the
window widths and their mean against the mean longest row, and both speedups over the first
multiple; the CPU model, the host CPUs and the command. The corpus is read from a
`shared/data` directory beside the clone when there is one, else from the data root (as
`benchmarks.epoch` does).
"""

import json
import statistics
import sys
import time

from absl import app
from absl import flags
from absl import logging
import numpy as np
from ml_collections import config_flags

from attnlm_jax.common.errors import UserError
from attnlm_jax.common import logging_utils
from attnlm_jax.evaluation import evaluate
from attnlm_jax.testtime import dynamic_eval
from attnlm_jax.training import train
from benchmarks import epoch
from benchmarks import provenance

SPLIT = "valid"
# The passes of one rule's search on a table's page: nine grid points, test adapted, test
# static (`testtime`); the static pass is cheaper, and steps past a grid's edges add more.
SEARCH_PASSES = 11

FLAGS = flags.FLAGS


def define_flags() -> None:
  """The command line's flags (defined when run as a program)."""
  config_flags.DEFINE_config_file("config", None,
                                  "Training config, e.g. configs/ptb.py:score=single.")
  flags.DEFINE_list("multiples", ["16", "4"], "Padding multiples to time, in order (each "
                    "one's speedup is the first's seconds over its own).")
  flags.DEFINE_enum("rule", "sgd", dynamic_eval.METHODS, "The update rule.")
  flags.DEFINE_float("learning_rate", None, "The rule's learning rate (default: the "
                     "smallest of its grid).")
  flags.DEFINE_float("decay", None, "The rule's decay (default: the smallest of its grid).")
  flags.DEFINE_integer("windows", 0, "Time the first this many windows of valid (0: all).")
  flags.DEFINE_integer("passes", 2, "Passes per evaluator, as a grid search makes them "
                       "(the first compiles); at least 2.")
  flags.DEFINE_integer("rounds", 1, "Rounds, each timing every multiple (medians count).")


def initial_model(config) -> evaluate.TrainedModel:
  """The config's initial parameters as a model to evaluate (the corpus found as
  `benchmarks.epoch` finds it)."""
  config, data, params = train.prepare(epoch.bench_config(config, 1), "/nonexistent-workdir")
  return evaluate.TrainedModel(config, data.vocab, params, 0)


def time_passes(model: evaluate.TrainedModel, multiple: int, rule_name: str,
                learning_rate: float, decay: float, num_windows: int, passes: int) -> dict:
  """Seconds of each of `passes` passes over the first `num_windows` windows of valid (0: all)
  by one evaluator, as a grid search makes them (the first compiles a step per window width),
  windows padded to a multiple of `multiple`."""
  evaluator = dynamic_eval.DynamicEvaluator(model, time_multiple=multiple)
  rule = evaluator.rule(rule_name)
  windows = evaluator.windows(SPLIT)
  windows = windows[:num_windows] if num_windows else windows
  tokens = len(evaluator.data.split(SPLIT).tokens)
  read = sum(int(w.batch["lengths"].sum()) for w in windows)
  seconds = []
  for _ in range(passes):
    started = time.perf_counter()
    log_probs = evaluator.log_probs(windows, tokens, rule, learning_rate, decay)
    seconds.append(time.perf_counter() - started)
    if np.isnan(log_probs).sum() > tokens - read:
      raise UserError(f"the pass with lr {learning_rate:g}, decay {decay:g} diverged and "
                      "ended early, so its time is not a pass's: give a smaller "
                      "--learning_rate")
  widths = [int(w.batch["inputs"].shape[1]) for w in windows]
  return {"seconds": seconds, "windows": len(windows), "tokens": read,
          "widths": sorted(set(widths)), "mean_width": float(np.mean(widths)),
          "mean_longest_row": float(np.mean([w.batch["lengths"].max() for w in windows]))}


def main(argv: list[str]) -> None:
  if len(argv) > 1:
    sys.exit(f"error: unexpected arguments: {' '.join(argv[1:])}")
  if FLAGS.config is None:
    sys.exit("error: --config is required, e.g. --config=configs/ptb.py:score=single")
  try:
    multiples = [int(m) for m in FLAGS.multiples]
  except ValueError:
    sys.exit(f"error: --multiples={','.join(FLAGS.multiples)} must be whole numbers, e.g. 16,4")
  if len(multiples) < 2 or min(multiples) < 1:
    sys.exit(f"error: --multiples={','.join(FLAGS.multiples)} needs two or more numbers of at "
             "least 1, e.g. 16,4")
  if FLAGS.passes < 2:
    sys.exit(f"error: --passes={FLAGS.passes} must be at least 2 (the first pass compiles, "
             "the later ones do not)")
  logging_utils.quiet_libraries()
  logging.set_verbosity(logging.WARNING)
  grid = dynamic_eval.GRIDS[FLAGS.rule]
  learning_rate = (min(grid["learning_rate"]) if FLAGS.learning_rate is None
                   else FLAGS.learning_rate)
  decay = min(grid["decay"]) if FLAGS.decay is None else FLAGS.decay
  try:
    model = initial_model(FLAGS.config)
    rounds = {m: [] for m in multiples}
    for _ in range(FLAGS.rounds):
      for multiple in multiples:
        rounds[multiple].append(time_passes(model, multiple, FLAGS.rule, learning_rate,
                                            decay, FLAGS.windows, FLAGS.passes))
  except (UserError, ValueError) as e:
    sys.exit(f"error: {' '.join(str(e).split())}")
  first = {m: statistics.median(r["seconds"][0] for r in rounds[m]) for m in multiples}
  later = {m: statistics.median(s for r in rounds[m] for s in r["seconds"][1:])
           for m in multiples}
  search = {m: first[m] + (SEARCH_PASSES - 1) * later[m] for m in multiples}
  one = rounds[multiples[0]][0]
  print(json.dumps({
      "benchmark": "dynamic_eval", "config": config_flags.get_config_filename(FLAGS["config"]),
      "rule": FLAGS.rule, "learning_rate": learning_rate, "decay": decay, "split": SPLIT,
      "windows": one["windows"], "tokens": one["tokens"],
      "mean_longest_row": round(one["mean_longest_row"], 2), "search_passes": SEARCH_PASSES,
      "by_multiple": {str(m): {
          "first_pass_seconds": round(first[m], 3), "pass_seconds": round(later[m], 3),
          "search_seconds": round(search[m], 3),
          "rounds": [[round(s, 3) for s in r["seconds"]] for r in rounds[m]],
          "widths": rounds[m][0]["widths"], "mean_width": round(rounds[m][0]["mean_width"], 2),
          "pass_speedup": round(later[multiples[0]] / later[m], 2),
          "search_speedup": round(search[multiples[0]] / search[m], 2)} for m in multiples},
      **provenance.machine_and_command("benchmarks.dynamic_eval")}))


if __name__ == "__main__":
  define_flags()
  app.run(main)
