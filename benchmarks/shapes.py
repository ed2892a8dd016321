"""The benchmarks' model shapes and their data and model configs."""

import dataclasses
import pathlib

import ml_collections

from attnlm_jax.data import locations
from attnlm_jax import models

# The corpora beside the repository, read when present (the benchmark figures' data).
SHARED_DATA = pathlib.Path(__file__).resolve().parents[1].parent / "shared" / "data"
BATCH_SIZE = 32
MAX_LEN = 35


@dataclasses.dataclass(frozen=True)
class Shape:
  """A benchmark model shape: corpus, LSTM size and the recipe's dropout."""
  corpus: str
  hidden_size: int
  num_layers: int
  dropout: float


SHAPES = {
    # Zaremba et al. (2015) small: 2 x 200 on PTB.
    "ptb_small": Shape("ptb", 200, 2, 0.0),
    # The papers' PTB recipe: 2 x 650, vocabulary 10,000.
    "ptb_medium": Shape("ptb", 650, 2, 0.5),
    # The papers' WikiText-2 recipe: 2 x 1000, vocabulary 33,278.
    "wt2_large": Shape("wikitext2", 1000, 2, 0.65),
}


def data_config(corpus: str) -> ml_collections.ConfigDict:
  """config.data for `corpus` read from ../shared/data, else from the data root
  (`locations.data_root()`), else the embedded corpus when neither holds it."""
  subdir = locations.CORPORA[corpus].subdir
  for directory in (SHARED_DATA / subdir, locations.corpus_dir(corpus)):
    if directory.is_dir():
      break
  else:
    corpus, directory = "embedded", ""
  return ml_collections.ConfigDict({
      "corpus": corpus, "data_dir": str(directory), "source": "text",
      "batch_size": BATCH_SIZE, "eval_batch_size": BATCH_SIZE, "max_len": MAX_LEN,
      "bucket": False, "span": "sentence", "seed": 0})


def model_config(shape: Shape, score: str, vocab_size: int,
                 compute_dtype: str = "float32") -> ml_collections.ConfigDict:
  """config.model of a shape (the papers' recipe otherwise)."""
  config = models.default_config()
  config.update(vocab_size=vocab_size, hidden_size=shape.hidden_size,
                num_layers=shape.num_layers, dropout=shape.dropout, score=score,
                max_len=MAX_LEN, forget_bias=1.0 if score == "average" else 0.0,
                compute_dtype=compute_dtype)
  models.validate(config)
  return config
