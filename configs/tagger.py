"""The left-to-right POS tagger on CoNLL-2000 (the tag source of the POS-input LMs).

    python -m attnlm_jax.main --mode=train_tagger --config=configs/tagger.py --workdir=DIR

prints one JSON line per epoch and then the accuracy on the CoNLL-2000 test split; the tagger
is saved in DIR (see attnlm_jax/tagger/trainer.py). Cao & Yu's tagger (a) reached 96.4% (on PTB,
against Stanford tags) with 3.7M parameters. This recipe (4.4M parameters) tags 93.2% of the
CoNLL-2000 test split without punctuation (41,981 tokens) correctly after its 8 epochs, read
as PTB shows it (words outside PTB's vocabulary as <unk>; 94.7% of the words as spelled)
(docs/results/das/, row `tagger`).

The corpora come from `python -m attnlm_jax.data.download --corpus=conll2000` and
`--corpus=treebank_sample` (into the data root, see docs/data.md); without the treebank
sample, `--config.data.treebank_dir=` (empty) trains on CoNLL-2000 alone.
"""

import ml_collections

from attnlm_jax.data import locations


def get_config(arg=None) -> ml_collections.ConfigDict:
  """The tagger recipe: 1 x 512 LSTM over word and suffix embeddings, Adam, 8 epochs."""
  del arg
  config = ml_collections.ConfigDict()
  config.seed = 0                          # Seeds the parameters, dropout and data order.

  config.data = ml_collections.ConfigDict()
  config.data.data_dir = str(locations.corpus_dir("conll2000"))  # train.txt and test.txt.
  config.data.drop_punctuation = True      # Remove punctuation tokens, as in the PTB files.
  config.data.min_count = 2                # Rarer training words are read as <unk>.
  config.data.batch_size = 32              # Sentences per batch.
  config.data.max_train_sentences = 0      # Use only the first N training sentences (0: all).
  # More training sentences: the NLTK Penn Treebank sample (WSJ sections 00-01, disjoint
  # from the CoNLL-2000 test section 20); '' trains on CoNLL-2000 alone.
  config.data.treebank_dir = str(locations.corpus_dir("treebank_sample"))
  # The LM corpus the tagger will tag: words outside its vocabulary read as <unk> in
  # training and test, as that text shows them ('' keeps every word).
  config.data.lm_data_dir = str(locations.corpus_dir("ptb"))

  config.model = ml_collections.ConfigDict()
  config.model.embed_size = 256            # Word embedding size.
  config.model.suffix_lengths = (1, 2, 3, 4)  # Embed the word's last 1..4 characters,
  config.model.prefix_lengths = (1, 2, 3)  # its first 1..3 characters
  config.model.use_shape = True            # and its shape (digit, hyphen, ..., length).
  config.model.suffix_size = 32            # Embedding size of each sub-word item.
  config.model.hidden_size = 512           # LSTM units.
  config.model.num_layers = 1              # Stacked LSTM layers.
  config.model.dropout = 0.5               # Dropout on embeddings, between layers, output.
  config.model.word_dropout = 0.05         # Training words read as <unk> with this chance.
  config.model.init_scale = 0.1            # Weights start U(-0.1, 0.1); biases 0.

  config.train = ml_collections.ConfigDict()
  config.train.learning_rate = 2e-3        # Adam learning rate.
  config.train.num_epochs = 8              # Passes over the training split.
  config.train.grad_clip = 5.0             # Global gradient norm clip.
  config.train.ema_decay = 0.999           # Save a moving average of the parameters (0: off).
  return config
