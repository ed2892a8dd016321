"""Demo: a small attentive LSTM on the embedded corpus, trained in minutes on a laptop CPU.

    python -m attnlm_jax.main --config=configs/demo.py --workdir=/tmp/demo

The embedded corpus ships inside the package (attnlm_jax/data/embedded), so this runs
offline from a fresh clone. Same recipe as the papers, scaled down.
"""

import pathlib
import runpy

_DEFAULT = runpy.run_path(str(pathlib.Path(__file__).with_name("default.py")))


def get_config(arg=None):
  """The demo config; `arg` = "score=NAME" picks another score (default: single)."""
  args = _DEFAULT["parse_arg"](arg, score="single")
  config = _DEFAULT["get_config"]()
  config.data.corpus = "embedded"          # Read from the package, no files needed.
  config.data.data_dir = ""                # Unused by the embedded corpus.
  config.model.hidden_size = 64            # 1 x 64 units.
  config.model.num_layers = 1              # One LSTM layer.
  config.model.dropout = 0.1               # Light dropout for a small model.
  config.model.score = args.score          # The attention score.
  config.model.forget_bias = 1.0 if args.score == "average" else 0.0  # Averaging LM: 1.0.
  config.data.bucket = args.score != "conv1x1"  # conv1x1's batch norm: random sentences.
  config.train.learning_rate = 0.5         # Half the papers' 1.0, at which this small model's
                                           # first 250 steps jump above a uniform guess's loss
                                           # (benchmarks/results/2026-11-29_demo_learning_rate).
  config.train.lr_decay_after = 4          # Halve the learning rate after epoch 4.
  config.train.grad_shards = 2            # The same run on 1 and 2 devices.
  config.train.num_epochs = 8              # At most 8 epochs (~15 s each on 2 cores).
  config.train.patience = 2                # Stop after 2 epochs without improvement.
  config.train.save_every_steps = 200      # Step checkpoints.
  config.train.log_every_steps = 50        # Progress every 50 steps.
  return config
