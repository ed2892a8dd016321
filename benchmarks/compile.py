"""Compiling a run's steps one by one against side by side (`steps.compile_side_by_side`).

    python -m benchmarks.compile --config=configs/ptb.py:score=proj [--rounds=1]

With bucketing a run needs one training program per batch width and one evaluation program
per batch shape; the training loop compiles them all before its first step
(`train.compile_steps`), on a pool of threads, one per host CPU. This times that against
compiling the same programs one after another, each measurement in a fresh process (nothing
compiled before it; no persistent compilation cache), the modes alternating for `--rounds`
rounds, and prints one JSON line: the seconds of each mode (the medians and every round),
their ratio, the number of programs, the CPU model, the host CPUs and the command. The
corpus is read from a `shared/data` directory beside the clone when there is one, else from
the data root (as `benchmarks.epoch` does).
"""

import json
import statistics
import subprocess
import sys
import time

from absl import app
from absl import flags
from absl import logging
from ml_collections import config_flags

from attnlm_jax.common.errors import UserError
from attnlm_jax.common import logging_utils
from attnlm_jax.training import parallel
from attnlm_jax.training import steps
from attnlm_jax.training import train
from benchmarks import epoch
from benchmarks import provenance

MODES = ("one_by_one", "side_by_side")

FLAGS = flags.FLAGS


def define_flags() -> None:
  """The command line's flags (defined when run as a program)."""
  config_flags.DEFINE_config_file("config", None,
                                  "Training config, e.g. configs/ptb.py:score=proj.")
  flags.DEFINE_integer("rounds", 1, "Rounds, each timing both modes (medians count).")
  flags.DEFINE_enum("mode", None, MODES, "Time one mode in this process (each round runs "
                    "one process per mode).")


def seconds_to_compile(config, mode: str) -> dict:
  """Seconds to compile every program of epoch 1 of `config`, one by one or side by side."""
  config, data, params = train.prepare(epoch.bench_config(config, 1), "/nonexistent-workdir")
  state = steps.initial_state(config, params)
  train_step, evaluator = steps.TrainStep(config), steps.Evaluator(config.model)
  p_state = train_step.initial_state(state["params"], state["opt_state"], 0)
  compilations, widths = train.step_compilations(
      train_step, evaluator, p_state, parallel.replicate(state["rng"]), data, 1, config)
  started = time.perf_counter()
  if mode == "side_by_side":
    steps.compile_side_by_side(compilations)
  else:
    for compile_one in compilations:
      compile_one()
  return {"seconds": time.perf_counter() - started, "programs": len(compilations),
          "train_widths": widths}


def main(argv: list[str]) -> None:
  if len(argv) > 1:
    sys.exit(f"error: unexpected arguments: {' '.join(argv[1:])}")
  if FLAGS.config is None:
    sys.exit("error: --config is required, e.g. --config=configs/ptb.py:score=proj")
  logging_utils.quiet_libraries()
  logging.set_verbosity(logging.WARNING)
  if FLAGS.mode:
    try:
      print(json.dumps(seconds_to_compile(FLAGS.config, FLAGS.mode)))
    except (UserError, ValueError) as e:
      sys.exit(f"error: {' '.join(str(e).split())}")
    return
  args = [a for a in sys.argv[1:] if not a.startswith("--rounds")]
  rounds = {mode: [] for mode in MODES}
  for _ in range(FLAGS.rounds):
    for mode in MODES:
      run = subprocess.run([sys.executable, "-m", "benchmarks.compile", *args, f"--mode={mode}"],
                           capture_output=True, text=True, check=False)
      if run.returncode:
        sys.exit(run.stderr.strip().splitlines()[-1])
      rounds[mode].append(json.loads(run.stdout.strip().splitlines()[-1]))
  seconds = {mode: statistics.median(r["seconds"] for r in rounds[mode]) for mode in MODES}
  print(json.dumps({
      "benchmark": "compile", "config": config_flags.get_config_filename(FLAGS["config"]),
      "programs": rounds["side_by_side"][0]["programs"],
      "train_widths": rounds["side_by_side"][0]["train_widths"],
      **{f"{mode}_seconds": round(seconds[mode], 2) for mode in MODES},
      "speedup": round(seconds["one_by_one"] / seconds["side_by_side"], 2),
      "rounds": {mode: [round(r["seconds"], 2) for r in rounds[mode]] for mode in MODES},
      **provenance.machine_and_command("benchmarks.compile")}))


if __name__ == "__main__":
  define_flags()
  app.run(main)
