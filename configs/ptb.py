"""Penn Treebank, 2 x 650 (Salton et al. 2017, 2018): one config per row of the table.

    --config=configs/ptb.py:score=single     (none, proj, single, combined, average, conv1x1)

Recipe: dropout 0.5, SGD lr 1.0 halved every epoch after epoch 12, patience 10, batch 32,
max_len 35, forget-gate bias 1.0 for the averaging model. Two rows start at learning rate 0.5:
the averaging model, which at the papers' 1.0 does not learn at 2 x 650 (its validation perplexity
stays above a unigram model's for five epochs; docs/reproduce.md, "average at learning rate 1.0"),
and the convolutional-attention model, whose training loss at 1.0 stays above a uniform guess's
for its first 400 steps (docs/reproduce.md, "conv1x1 at learning rate 1.0").
"""

import pathlib
import runpy

_DEFAULT = runpy.run_path(str(pathlib.Path(__file__).with_name("default.py")))


def get_config(arg=None):
  """The PTB config for `arg` = "score=NAME" (default: single)."""
  args = _DEFAULT["parse_arg"](arg, score="single")
  config = _DEFAULT["get_config"]()
  config.model.score = args.score          # The attention score of this table row.
  config.model.forget_bias = 1.0 if args.score == "average" else 0.0  # Averaging LM: 1.0.
  # The papers' 1.0; 0.5 for the two models that do not learn at 1.0 (docstring).
  config.train.learning_rate = 0.5 if args.score in ("average", "conv1x1") else 1.0
  config.data.bucket = args.score != "conv1x1"  # conv1x1's batch norm: random sentences.
  return config
