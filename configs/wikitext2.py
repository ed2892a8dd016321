"""WikiText-2, 2 x 1000 (Salton & Kelleher 2018): one config per row of the table.

    --config=configs/wikitext2.py:score=single  (none, proj, single, combined, average, conv1x1)

Recipe: dropout 0.65, SGD lr 1.0 divided by 1.15 every epoch after epoch 14, patience 10,
batch 32, max_len 35, forget-gate bias 1.0 for the averaging model. Every row keeps the papers'
1.0, the averaging and convolutional-attention models too, which configs/ptb.py starts at 0.5
because at 2 x 650 they do not learn at 1.0; whether they do at 2 x 1000 on WikiText-2 is
untested (these rows have not been run).
"""

import pathlib
import runpy

from attnlm_jax.data import locations

_DEFAULT = runpy.run_path(str(pathlib.Path(__file__).with_name("default.py")))


def get_config(arg=None):
  """The WikiText-2 config for `arg` = "score=NAME" (default: single)."""
  args = _DEFAULT["parse_arg"](arg, score="single")
  config = _DEFAULT["get_config"]()
  config.data.corpus = "wikitext2"         # Sentences split from WikiText-2 paragraphs.
  config.data.data_dir = str(locations.corpus_dir("wikitext2"))  # wiki.*.tokens files.
  config.model.hidden_size = 1000          # 2 x 1000 units, embeddings 1000, tied.
  config.model.dropout = 0.65              # Non-recurrent dropout.
  config.model.score = args.score          # The attention score of this table row.
  config.model.forget_bias = 1.0 if args.score == "average" else 0.0  # Averaging LM: 1.0.
  config.data.bucket = args.score != "conv1x1"  # conv1x1's batch norm: random sentences.
  config.train.lr_decay_after = 14         # Decay starts after epoch 14 ...
  config.train.lr_decay_divisor = 1.15     # ... dividing the lr by 1.15 every epoch.
  config.train.num_epochs = 60             # Maximum number of epochs.
  return config
