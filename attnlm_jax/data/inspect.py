"""Prints corpus statistics as one JSON object (docs/data.md, "`inspect`").

    python -m attnlm_jax.data.inspect --data_dir=DIR [--corpus=ptb|wikitext2|embedded]
"""

from __future__ import annotations

import json
import sys
from typing import Any, Sequence

from absl import app
from absl import flags
import ml_collections

from attnlm_jax.data import batching
from attnlm_jax.data import corpus as corpus_lib
from attnlm_jax.data import pipeline
from attnlm_jax.data.vocab import VocabularyError

_DATA_DIR = flags.DEFINE_string("data_dir", "", "Directory holding the corpus files "
                                "('' for the embedded corpus).")
_CORPUS = flags.DEFINE_enum("corpus", None, corpus_lib.CORPORA,
                            "Corpus layout; detected from --data_dir when omitted.")
_SPAN = flags.DEFINE_enum("span", "sentence", ("sentence", "document"), "Batch rows: "
                          "sentences, or consecutive sentences of a document packed up to "
                          "--max_len (the stream protocol's windows are never padded).")
_MAX_LEN = flags.DEFINE_integer("max_len", 35, "Training truncation length (paper: 35).")
_BATCH_SIZE = flags.DEFINE_integer("batch_size", 32, "Rows per batch (paper: 32).")
_SEED = flags.DEFINE_integer("seed", 0, "Data seed of the epoch-0 training order.")
_WIDTH_MULTIPLE = flags.DEFINE_integer(
    "width_multiple", 4, "Bucketed batch widths are rounded up to a multiple of this "
    "(config.data.width_multiple).")


def split_stats(data: pipeline.LMData, split: str) -> dict[str, Any]:
  """Counts and pad fractions of one split under data.config (epoch 0 order)."""
  config = data.config
  encoded = data.split(split)
  _, lengths = data.units(split)
  words = int(encoded.sentence_lengths.sum()) - len(encoded.sentence_lengths)
  tokens = len(encoded.tokens)
  pads = {}
  for name, bucket in (("protocol", False), ("bucketed", True)):
    plan = batching.train_plan(lengths, config.batch_size, config.seed, 0, bucket,
                               config.max_len)
    rows = batching.row_lengths(plan, lengths, config.max_len)
    pads[name] = batching.pad_fraction(rows, None if bucket else config.max_len,
                                       config.width_multiple, config.max_len)
  eval_rows = batching.row_lengths(batching.eval_plan(lengths, config.batch_size), lengths)
  stats = {}
  if encoded.lines is not None:
    stats.update(lines=encoded.lines, line_tokens=words + encoded.lines)
  stats.update(
      words=words,
      sentences=len(encoded.sentence_lengths),
      documents=int(encoded.documents.max()) + 1,
      tokens=tokens,
      oov=encoded.oov,
      rows=len(lengths),
      truncated_tokens=int(tokens - rows.sum()),
      pad_fraction_protocol=round(pads["protocol"], 4),
      pad_fraction_bucketed=round(pads["bucketed"], 4),
      pad_fraction_eval=round(batching.pad_fraction(eval_rows), 4),
  )
  return stats


def corpus_stats(corpus: str | None, data_dir: str, span: str = "sentence",
                 max_len: int = 35, batch_size: int = 32, seed: int = 0,
                 width_multiple: int = 4) -> dict[str, Any]:
  """The statistics object printed by this command.

  Raises:
    CorpusError: unusable corpus files or settings.
  """
  corpus = corpus or corpus_lib.detect(data_dir)
  config = ml_collections.ConfigDict(dict(
      corpus=corpus, data_dir=data_dir, source="text", batch_size=batch_size,
      eval_batch_size=batch_size, max_len=max_len, bucket=False, span=span, seed=seed,
      width_multiple=width_multiple))
  data = pipeline.load(config)
  return {
      "corpus": corpus,
      "data_dir": data_dir,
      "span": span,
      "max_len": max_len,
      "batch_size": batch_size,
      "width_multiple": width_multiple,
      "vocab_size": len(data.vocab),
      "splits": {split: split_stats(data, split) for split in corpus_lib.SPLITS},
  }


def main(argv: Sequence[str]) -> None:
  """Prints the statistics of --corpus in --data_dir as one JSON object."""
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
  try:
    stats = corpus_stats(_CORPUS.value, _DATA_DIR.value, _SPAN.value, _MAX_LEN.value,
                         _BATCH_SIZE.value, _SEED.value, _WIDTH_MULTIPLE.value)
  except (corpus_lib.CorpusError, VocabularyError) as e:
    # The corpus library names training's flags; this command's are the fields' own names.
    print(f"error: {str(e).replace('--config.data.', '--')}", file=sys.stderr)
    sys.exit(1)
  print(json.dumps(stats, indent=2))


if __name__ == "__main__":
  app.run(main)
