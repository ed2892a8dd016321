"""Which of the released network's settings slows its first epochs? The `released` row (2 x
650, configs/released.py) stood at valid perplexity 1,393 after epoch 1 and 1,025 after epoch
2, where `proj` (the paper's settings, the same output layer) stood at 601 after epoch 1.
This trains the released network at 2 x 200 on the first BATCHES batches of each of 3
epochs: as released, with each released setting put back to the paper's one at a time, and
with all of them put back. It prints one JSON line per variant: its overrides and the
validation perplexity after each epoch (the whole valid split).

From the repository root:
  python docs/results/salton_ptb/probes/released_ablation/probe.py WORKDIR > output.jsonl
"""

import json
import sys

from etils import epath

from attnlm_jax import data as data_lib
from attnlm_jax.common import config_files
from attnlm_jax.experiments import runs
from attnlm_jax.training import train

CONFIG = "configs/released.py:score=single,memory=zero_slot"
SIZE = {"model.hidden_size": 200, "train.num_epochs": 3}
BATCHES = 300  # Training batches of each epoch.
# Each released setting, put back to the paper's one at a time ("released": none).
VARIANTS = {
    "released": {},
    "shuffled": {"data.shuffle": True},
    "tanh_head": {"model.head_activation": "tanh"},
    "dropout_before_head": {"model.dropout_site": "before_head"},
    "forget_bias_0": {"model.forget_bias": 0.0},
    "start_symbol": {"data.start_symbol": True},
    # Every one of them the paper's: `proj` (attention's context is 0 with memory=zero_slot).
    "paper_settings": {"data.shuffle": True, "data.bucket": True, "data.start_symbol": True,
                       "model.head_activation": "tanh", "model.dropout_site": "before_head",
                       "model.head_bias_init": "zeros", "model.forget_bias": 0.0,
                       "train.lr_decay_after": 12},
}


def main(workdir: str) -> None:
  for name, overrides in VARIANTS.items():
    config = config_files.load_config(CONFIG, {**SIZE, **overrides})
    row_dir = epath.Path(workdir) / name
    if not runs.is_finished(row_dir):
      data = data_lib.load(config.data).first_batches(BATCHES)
      train.train_and_evaluate(config, row_dir, data=data)
    run = runs.read_run(row_dir)
    print(json.dumps({"variant": name, "overrides": overrides, "batches_per_epoch": BATCHES,
                      "valid_curve": run["valid_curve"]}), flush=True)


if __name__ == "__main__":
  main(sys.argv[1])
