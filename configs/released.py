"""The network the released code of Salton et al. (2017) trains (giancds/attentive_lm), 2 x 650
on Penn Treebank: configs/ptb.py with each thing that code does differently set by its field.

    --config=configs/released.py:score=single,memory=zero_slot   (row `released`)
    --config=configs/released.py:score=single,memory=filled      (row `released_attention`)

`memory=zero_slot` is what its training graph attends over: the one zero slot that
`_compute_decoder_context` puts in an empty memory before `tf.nn.dynamic_rnn` traces the step
once, so the context is 0 and attention gets no gradient; `memory=filled` is the same network
with the memory the paper describes. The code's lines behind each field, and the graph run:
docs/results/salton_ptb/probes/released_graph/README.md.
"""

import pathlib
import runpy

_PTB = runpy.run_path(str(pathlib.Path(__file__).with_name("ptb.py")))
_DEFAULT = runpy.run_path(str(pathlib.Path(__file__).with_name("default.py")))


def get_config(arg=None):
  """The released network for `arg` = "score=NAME,memory=zero_slot|filled"."""
  args = _DEFAULT["parse_arg"](arg, score="single", memory="zero_slot")
  config = _PTB["get_config"](f"score={args.score}")
  config.model.memory = args.memory           # zero_slot: the released training graph's.
  config.model.head_activation = "linear"     # h'_t = W [h_t; c_t] + b: `linear`, no tanh.
  config.model.dropout_site = "after_head"    # Dropout on h'_t, the attentive cell's output.
  config.model.head_bias_init = "uniform"     # b from U(-0.05, 0.05), the scope initializer.
  config.model.forget_bias = 1.0              # BasicLSTMCell(forget_bias=1.0), every cell.
  config.train.learning_rate = 1.0            # 1.0 for every score.
  config.train.lr_decay_after = 13            # 0.5 ** max(e - 12, 0), e from 0: halved from
                                              # the 14th epoch.
  config.data.shuffle = False                 # Consecutive sentences, corpus order (a FIFO).
  config.data.bucket = False                  # Rows padded to 36 tokens, never bucketed.
  config.data.start_symbol = False            # A row starts with the sentence's first word,
                                              # read and never predicted.
  return config
