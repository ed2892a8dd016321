"""The shared recipe: Salton et al. (2017) on Penn Treebank, 2 x 650 tied LSTM + attention.

Variant configs (ptb.py, wikitext2.py, ...) start from this one and change a few fields.
Every field can be overridden on the command line, e.g. `--config.model.score=combined`.
"""

import ml_collections

from attnlm_jax.data import locations
from attnlm_jax import models


def parse_arg(arg, **defaults) -> ml_collections.ConfigDict:
  """Parses a config argument "key=value,key=value" (`configs/ptb.py:score=single`).

  Args:
    arg: the text after the colon of --config, or None.
    **defaults: the allowed keys and their default values (which also fix the types).

  Returns:
    A ConfigDict of the keys; an unknown key raises ValueError.
  """
  result = ml_collections.ConfigDict(defaults)
  for item in filter(None, (arg or "").split(",")):
    key, _, value = item.partition("=")
    if key not in defaults:
      raise ValueError(f"unknown config argument {key!r} in {arg!r}: use "
                       + ", ".join(f"{k}=..." for k in defaults))
    result[key] = type(defaults[key])(value)
  return result


def get_config(arg=None) -> ml_collections.ConfigDict:
  """The PTB recipe of the attentive LSTM papers (docs/models.md, docs/training.md)."""
  del arg
  config = ml_collections.ConfigDict()
  config.seed = 0                          # Seeds the parameters, dropout and data order.
  max_len = ml_collections.FieldReference(35)

  config.data = ml_collections.ConfigDict()
  config.data.corpus = "ptb"               # "ptb", "wikitext2" or "embedded".
  config.data.data_dir = str(locations.corpus_dir("ptb"))  # Directory of the corpus files.
  config.data.source = "text"              # "text" files or "tfds" (array_record) builders.
  config.data.cache_dir = ""               # Where TFDS-prepared datasets (source="tfds") are
                                           # built; "" = a tfds directory under data_root().
  config.data.batch_size = 32              # Sentences per training batch (all devices).
  config.data.eval_batch_size = 64         # Sentences per evaluation batch (all devices).
  config.data.max_len = max_len            # Training rows truncated to this (stream: window).
  config.data.bucket = True                # Batch sentences of similar length (same loss as
                                           # the papers' padding to max_len, ~6% pads not 39%).
  config.data.width_multiple = 4           # Bucketed widths rounded up to a multiple of this
                                           # (few distinct shapes to compile).
  config.data.span = "sentence"            # Row = one "sentence", a packed "document" span,
                                           # or a "stream" window (state carried).
  config.data.shuffle = True               # A new random order every epoch (False: batches
                                           # of consecutive sentences in corpus order).
  config.data.start_symbol = True          # A sentence row starts with the start symbol, so
                                           # its first word is predicted (False: it is read
                                           # and never predicted, as in the released code).
  config.data.seed = config.get_ref("seed")  # Shuffling seed (follows config.seed).

  # The model section starts from models.default_config(), which documents every field;
  # the recipe's values are set here.
  config.model = models.default_config()
  config.model.vocab_size = 0              # 0: taken from the training vocabulary.
  config.model.hidden_size = 650           # LSTM units = embedding size (tied softmax).
  config.model.num_layers = 2              # Stacked LSTM layers.
  config.model.dropout = 0.5               # Dropout on embeddings, between layers, output.
  config.model.score = "single"            # none|proj|single|combined|average|conv1x1|...
  config.model.max_len = max_len           # Memory slots in training (follows data.max_len).
  config.model.zero_slot = True            # Keep the zero state h_0 in the memory.
  config.model.forget_bias = 0.0           # Initial forget-gate bias (the averaging LM
                                           # uses 1.0: configs/ptb.py:score=average).
  config.model.init_scale = 0.05           # Weights start U(-0.05, 0.05); biases 0.

  config.train = ml_collections.ConfigDict()
  config.train.learning_rate = 1.0         # SGD learning rate of the first epochs.
  config.train.lr_schedule = "epochs"      # "epochs": lr divided every epoch after
                                           # lr_decay_after; "plateau": divided after each
                                           # epoch that leaves valid perplexity on a plateau.
  config.train.lr_decay_after = 12         # Last epoch at the initial learning rate.
  config.train.lr_decay_divisor = 2.0      # lr divided by this every later epoch.
  config.train.lr_plateau_improvement = 0.0  # "plateau": an epoch that lowers the best valid
                                           # perplexity by less than this fraction is on a
                                           # plateau.
  config.train.lr_plateau_patience = 1     # "plateau": lr divided after this many plateau
                                           # epochs in a row.
  config.train.min_learning_rate = 0.0    # Training ends before an epoch whose lr would be
                                           # below this (0: never).
  config.train.grad_clip = 5.0             # Global norm clip of the gradient of sum/batch.
  config.train.head_lr_factor = 1.0        # The output layer h'_t's lr / the others' (1.0:
                                           # the papers; docs/training.md, "Configs").
  config.train.grad_shards = 0            # Gradient = mean over this many equal batch shards,
                                           # summed in a fixed order: the same value gives
                                           # bitwise the same run on any device count dividing
                                           # it (0: one shard per device, fastest).
  config.train.num_epochs = 40             # Maximum number of epochs.
  config.train.patience = 10               # Stop after this many epochs without a better
                                           # valid perplexity, then roll back to the best.
  config.train.save_every_steps = 500      # Step checkpoints (0: only at epoch ends).
  config.train.log_every_steps = 50        # Steps between progress lines / metrics.
  return config
