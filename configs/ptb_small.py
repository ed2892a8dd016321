"""A small Penn Treebank protocol: the `ptb_cpu` table, one row per score, on a 2-core CPU.

    python -m attnlm_jax.main --config=configs/ptb_small.py:score=single --workdir=DIR

The papers' recipe (tied LSTM, SGD, clipping, sentence protocol, halving schedule) with a
1 x 200 model and batches of 64, so the attention scores can be compared on real data without
an accelerator. Numbers are not comparable with the 2 x 650 tables. Every row gets the same
fixed schedule, long enough for the slowest row (the merge layer of the attentive models
learns slowly in the first epochs, see docs/models.md) to stop improving: the first learning
rate for 10 epochs, then halved every epoch, 16 epochs; the best epoch by validation
perplexity is kept. The first learning rate is the papers' 1.0, except for `conv1x1`: its
paper prints none, and its head h_t + beta * fc(bn(c_t)) has no tanh to bound it, so at 1.0
it diverges in the first epoch (docs/reproduce.md, "conv1x1 at learning rate 1.0"); it starts at 0.5, and
reads batches of random sentences, not bucketed by length (its batch norm, docs/models.md).
An epoch of 658 batches takes about 4 minutes on 2 cores.
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
  config.train.learning_rate = 0.5 if args.score == "conv1x1" else 1.0  # Why 0.5: docstring.
  config.data.bucket = args.score != "conv1x1"  # conv1x1's batch norm: random sentences.
  config.train.lr_decay_after = 10         # Halve the learning rate after epoch 10.
  config.train.num_epochs = 16             # 16 epochs: the last lr is the first / 64.
  config.train.patience = 16               # No early stop: every row runs the whole schedule.
  return config
