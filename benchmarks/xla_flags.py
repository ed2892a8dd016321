"""XLA CPU flags against the default, on this project's training and evaluation steps.

    python -m benchmarks.xla_flags [--shape=ptb_medium --score=single --steps 6 --repeats 3
        --rounds 2 --flag_sets=default,no_thunk_runtime]

XLA reads `XLA_FLAGS` once, at start-up, so every flag set (`FLAG_SETS`) runs in a fresh
subprocess. There the data-parallel `steps.TrainStep` and the pmapped `steps.eval_step` of
benchmarks.throughput run on the same padded PTB batches (the first `--steps` batches of epoch
1, batch 32), each timed `--repeats` times after warm-up (the median counts). The flag sets
alternate round by round for `--rounds` rounds, the default first in each, and the figure of a
set is its median over the rounds.

It prints one JSON line: per flag set its XLA_FLAGS, milliseconds per training and evaluation
step, and `speedup` = the default's time / this set's time (above 1: the flags help), or the
error that stopped it (e.g. a flag this jaxlib does not know); then the machine and the
command (`provenance.machine_and_command`).
"""

import json
import os
import statistics
import subprocess
import sys

from absl import app
from absl import flags
import jax

from attnlm_jax.common.errors import UserError
from attnlm_jax import data as data_lib
from attnlm_jax import models
from benchmarks import provenance
from benchmarks import throughput
from benchmarks.shapes import data_config
from benchmarks.shapes import model_config
from benchmarks.shapes import SHAPES

# The CPU flags of jaxlib 0.10 that plausibly change a matmul-bound step.
FLAG_SETS = {
    "default": "",
    "no_thunk_runtime": "--xla_cpu_use_thunk_runtime=false",
    "single_thread_eigen": "--xla_cpu_multi_thread_eigen=false",
    "onednn": "--xla_cpu_use_onednn=true",
    "xnnpack": "--xla_cpu_use_xnnpack=true",
    "fast_math": "--xla_cpu_enable_fast_math=true",
    "vector_width_512": "--xla_cpu_prefer_vector_width=512",
    "ynn_individual_dots":
        "--xla_cpu_experimental_ynn_fusion_type=LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT",
    "eigen_dots": "--xla_cpu_experimental_ynn_fusion_type=",
}

# --shape, --score, --steps (batches per timing) and --rounds (alternating rounds over the
# flag sets) are benchmarks.throughput's flags, with smaller defaults here (`main`).
flags.DEFINE_integer("repeats", 3, "Timings per subprocess (median).")
flags.DEFINE_list("flag_sets", list(FLAG_SETS), "Flag sets to compare (names in FLAG_SETS).")
flags.DEFINE_bool("probe", False, "Internal: time the steps in this process, print JSON.")
FLAGS = flags.FLAGS


def step_seconds(shape_name: str, score: str, steps: int, repeats: int) -> dict:
  """Median seconds per training and per evaluation step in this process."""
  shape = SHAPES[shape_name]
  data = data_lib.load(data_config(shape.corpus))
  config = model_config(shape, score, len(data.vocab))
  side = throughput.JaxSide(config, models.init(jax.random.PRNGKey(0), config))
  batches = side.device_batches(throughput.measured_batches(data, steps)["padded"])
  return {name: statistics.median(
      throughput.time_loop(run, batches, 2, jax.block_until_ready) for _ in range(repeats))
          / steps for name, run in (("train", side.train), ("eval", side.eval))}


def run_flag_set(xla_flags: str) -> dict:
  """`step_seconds` in a fresh subprocess with XLA_FLAGS=`xla_flags`."""
  command = [sys.executable, "-m", "benchmarks.xla_flags", "--probe", f"--shape={FLAGS.shape}",
             f"--score={FLAGS.score}", f"--steps={FLAGS.steps}", f"--repeats={FLAGS.repeats}"]
  done = subprocess.run(command, capture_output=True, text=True, check=False,
                        env={**os.environ, "XLA_FLAGS": xla_flags})
  if done.returncode:
    return {"error": (done.stderr.strip().splitlines() or ["failed"])[-1][-300:]}
  return json.loads(done.stdout.strip().splitlines()[-1])


def compare(names: list[str], rounds: int) -> dict:
  """Every flag set against the default, alternating (see the module docstring)."""
  unknown = [n for n in names if n not in FLAG_SETS]
  if unknown:
    raise UserError(f"--flag_sets: unknown {', '.join(unknown)}; choose from "
                    f"{', '.join(FLAG_SETS)}")
  names = ["default"] + [n for n in names if n != "default"]
  runs = {name: [] for name in names}
  for _ in range(rounds):
    for name in names:
      runs[name].append(run_flag_set(FLAG_SETS[name]))
  if any("error" in r for r in runs["default"]):
    raise UserError(f"the default run failed: {runs['default'][0].get('error')}")
  median = lambda name, step: statistics.median(r[step] for r in runs[name])
  record = {}
  for name in names:
    errors = [r["error"] for r in runs[name] if "error" in r]
    record[name] = {"xla_flags": FLAG_SETS[name]}
    if errors:
      record[name]["error"] = errors[0]
      continue
    for step in ("train", "eval"):
      record[name][f"{step}_ms"] = round(1e3 * median(name, step), 1)
      record[name][f"{step}_speedup"] = round(median("default", step) / median(name, step), 3)
  return record


def main(argv: list[str]) -> None:
  if len(argv) > 1:
    sys.exit(f"error: unexpected arguments: {' '.join(argv[1:])}")
  try:
    if FLAGS.probe:
      print(json.dumps(step_seconds(FLAGS.shape, FLAGS.score, FLAGS.steps, FLAGS.repeats)))
      return
    record = {"shape": FLAGS.shape, "score": FLAGS.score, "steps": FLAGS.steps,
              "rounds": FLAGS.rounds, "flag_sets": compare(FLAGS.flag_sets, FLAGS.rounds),
              **provenance.machine_and_command("benchmarks.xla_flags")}
  except (UserError, data_lib.CorpusError) as e:
    sys.exit(f"error: {' '.join(str(e).split())}")
  print(json.dumps(record))


if __name__ == "__main__":
  FLAGS.set_default("steps", 6)
  FLAGS.set_default("rounds", 2)
  app.run(main)
