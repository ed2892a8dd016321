"""A small Penn Treebank protocol: a 2-core CPU trains it in about an hour.

    python -m attnlm_jax.main --config=configs/ptb_small.py:score=single --workdir=DIR

The papers' recipe (tied LSTM, SGD, clipping, halving schedule, early stopping) with a
1 x 200 model, larger batches and a few epochs, so attention scores can be compared on
real data without an accelerator. Numbers are not comparable with the 2 x 650 tables.
Measured on 2 shared CPU cores: `single` trains about 2,100 tokens/s (7 minutes an epoch of
658 batches), `none` about 4,200 tokens/s; 8 epochs of `single` take about an hour.
"""

import pathlib
import runpy

_DEFAULT = runpy.run_path(str(pathlib.Path(__file__).with_name("default.py")))


def get_config(arg=None):
  """The small PTB config for `arg` = "score=NAME" (default: single)."""
  args = _DEFAULT["parse_arg"](arg, score="single")
  config = _DEFAULT["get_config"]()
  config.model.hidden_size = 200           # 1 x 200 units, embeddings 200, tied.
  config.model.num_layers = 1              # One LSTM layer.
  config.model.dropout = 0.3               # Less dropout for a smaller model.
  config.model.score = args.score          # The attention score.
  config.model.forget_bias = 1.0 if args.score == "average" else 0.0  # Averaging LM: 1.0.
  config.data.batch_size = 64              # Fewer, larger steps per epoch.
  config.train.lr_decay_after = 4          # Halve the learning rate after epoch 4.
  config.train.num_epochs = 8              # At most 8 epochs.
  config.train.patience = 2                # Stop after 2 epochs without improvement.
  return config
