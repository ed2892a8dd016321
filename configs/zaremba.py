"""Zaremba, Sutskever & Vinyals (2015), "Recurrent neural network regularization", on PTB.

    --config=configs/zaremba.py:size=small      (small, medium, large)

The LSTM baselines of every table: the stream protocol (each split one token stream laid out
as 20 parallel streams, read in windows of 20 or 35 tokens with the state carried across
windows), untied softmax, dropout on the non-recurrent connections only, SGD on the summed
NLL / batch size with the gradient clipped at global norm, fixed schedules (no early stop:
the best epoch by validation perplexity is kept). The paper prints test perplexity 114.5 /
82.7 / 78.4 (valid 120.7 / 86.2 / 82.2) for small / medium / large.

| size | layers x units | init U(+-) | window | lr 1 for | then / epoch | epochs | dropout | clip |
| --- | --- | --- | --- | --- | --- | --- | --- | --- |
| small | 2 x 200 | 0.1 | 20 | 4 | 2 | 13 | 0 | 5 |
| medium | 2 x 650 | 0.05 | 35 | 6 | 1.2 | 39 | 0.5 | 5 |
| large | 2 x 1500 | 0.04 | 35 | 14 | 1.15 | 55 | 0.65 | 10 |

The divisors are the paper's ("decrease it by a factor of 1.2 after each epoch" for medium);
TensorFlow's PTB tutorial, which ports the recipe, divides medium by 1.25 (`lr_decay = 0.8`):
the `zaremba` table's row `medium_tutorial_decay`.
"""

import pathlib
import runpy

import ml_collections

_DEFAULT = runpy.run_path(str(pathlib.Path(__file__).with_name("default.py")))

# size -> (hidden, init_scale, window, lr_decay_after, lr_decay_divisor, epochs, dropout, clip)
RECIPES = {
    "small": (200, 0.1, 20, 4, 2.0, 13, 0.0, 5.0),
    "medium": (650, 0.05, 35, 6, 1.2, 39, 0.5, 5.0),
    "large": (1500, 0.04, 35, 14, 1.15, 55, 0.65, 10.0),
}


def get_config(arg=None) -> ml_collections.ConfigDict:
  """The Zaremba et al. recipe for `arg` = "size=NAME" (default: small)."""
  args = _DEFAULT["parse_arg"](arg, size="small")
  if args.size not in RECIPES:
    raise ValueError(f"unknown size {args.size!r} in {arg!r}: use one of {', '.join(RECIPES)}")
  hidden, init_scale, window, decay_after, divisor, epochs, dropout, clip = RECIPES[args.size]
  config = _DEFAULT["get_config"]()
  config.data.span = "stream"              # One token stream per split, windows carry state.
  config.data.bucket = False               # Streams are read in fixed windows.
  config.data.batch_size = 20              # 20 parallel streams in training.
  config.data.eval_batch_size = 20         # And in evaluation (the paper's valid protocol).
  config.data.max_len = window             # Window (BPTT length) = memory slots.
  config.model.score = "none"              # The plain LSTM LM.
  config.model.tie_embeddings = False      # A softmax matrix of its own.
  config.model.hidden_size = hidden        # Units per layer = embedding size.
  config.model.num_layers = 2              # Two layers.
  config.model.init_scale = init_scale     # Weights U(-init_scale, init_scale); biases 0.
  config.model.dropout = dropout           # Non-recurrent dropout.
  config.train.learning_rate = 1.0         # SGD.
  config.train.lr_decay_after = decay_after  # Last epoch at lr 1.0.
  config.train.lr_decay_divisor = divisor  # lr divided by this every later epoch.
  config.train.num_epochs = epochs         # A fixed number of epochs ...
  config.train.patience = epochs           # ... never stopped early.
  config.train.grad_clip = clip            # Global norm clip.
  return config
