"""Does conv1x1's batch norm let a model read when its sentence ends, and does that explain the
convolutional-attention paper's 58.4? A `conv1x1` at 1 x 200 trained on batches bucketed by
length (configs/ptb_small.py:score=conv1x1 with data.bucket=true; the training check that
refuses such batches is lifted here, and only here), then valid and test evaluated three ways:
- `running`: the batch norm's running statistics (what this project reports);
- `batch_bucketed`: each step's batch statistics over evaluation's batches, longest sentence
  first, so a batch holds sentences of nearly equal length (what a code that never switched
  its batch norm to running statistics would report);
- `batch_random`: batch statistics over batches of random sentences (the same size).
Dropout is off in all three.

From the repository root (trains the row first unless WORKDIR holds it finished):
  python docs/results/ptb_cpu/probes/conv1x1_leak/leak_probe.py WORKDIR > leak_probe.json
The same probe of a table's row at another size, its config and overrides with data.bucket=true
(the 2 x 650 check, minutes on a GPU):
  python docs/results/ptb_cpu/probes/conv1x1_leak/leak_probe.py WORKDIR salton_ptb/conv1x1
"""

import json
import sys

import numpy as np

from attnlm_jax.common import config_files
from attnlm_jax.data import pipeline
from attnlm_jax.evaluation import batch_statistics
from attnlm_jax.evaluation import evaluate
from attnlm_jax.experiments import runs
from attnlm_jax.experiments import tables
from attnlm_jax.training import run_config
from attnlm_jax.training import train

CONFIG = "configs/ptb_small.py:score=conv1x1"
OVERRIDES = {"data.bucket": True}
SEED = 0  # The order of the random batches.


def probed_config(table_row: str = "") -> tuple[str, dict]:
  """The config file and overrides the probe trains: CONFIG and OVERRIDES, or with "TABLE/ROW"
  that row's config and overrides, batches bucketed."""
  if not table_row:
    return CONFIG, OVERRIDES
  table, _, name = table_row.partition("/")
  row = {row.name: row for row in tables.select_rows(table, [name])}[name]
  return f"configs/{row.config}", {**row.overrides, **OVERRIDES}


def train_bucketed(workdir: str, config_file: str, overrides: dict) -> None:
  """Trains the row with the check against bucketed batches lifted (the others kept)."""
  check = run_config.check_training

  def check_all_but_bucketing(config):
    unbucketed = config.copy_and_resolve_references()
    unbucketed.data.bucket = False
    check(unbucketed)

  run_config.check_training = check_all_but_bucketing
  train.train_and_evaluate(config_files.load_config(config_file, overrides), workdir)


def random_batches(data, split: str, batch_size: int):
  """Every unit of `split` once, in batches of `batch_size` random units."""
  starts, lengths = data.units(split)
  order = np.random.default_rng(SEED).permutation(len(starts))
  for first in range(0, len(order), batch_size):
    rows = order[first:first + batch_size]
    yield pipeline.split_batch(data.split(split), starts[rows], lengths[rows],
                               int(lengths[rows].max()))


def main(workdir: str, table_row: str = "") -> dict:
  config, overrides = probed_config(table_row)
  if not runs.is_finished(workdir):
    train_bucketed(workdir, config, overrides)
  model = evaluate.load(workdir)
  data = model.data
  batch_size = model.config.data.eval_batch_size
  result = {"workdir_config": config, "overrides": overrides, "checkpoint_step": model.step,
            "eval_batch_size": batch_size}
  for split in ("valid", "test"):
    bucketed = (batch for _, batch in pipeline.eval_batches(data.split(split),
                                                            data.units(split), batch_size))
    result[split] = {
        "running": evaluate.evaluate(model, split),
        "batch_bucketed": batch_statistics.perplexities(model, bucketed, "batch"),
        "batch_random": batch_statistics.perplexities(
            model, random_batches(data, split, batch_size), "batch")}
  return result


if __name__ == "__main__":
  print(json.dumps(main(*sys.argv[1:3])))
