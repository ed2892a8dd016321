"""TensorFlow Datasets builders for the corpora, stored as array_record, read without TensorFlow.

Each example is one sentence as `corpus.read_split` produces it: {"text": the words joined by
single spaces, "document": its document index}, in corpus order. Prepared datasets live under
`cache_dir/<corpus>-<hash of the source files>/` (docs/data.md, "Corpora and layouts").
"""

from __future__ import annotations

import hashlib
from typing import Any

from absl import logging
from etils import epath
import numpy as np
import tensorflow_datasets as tfds
import tqdm

from attnlm_jax.common import logging_utils
from attnlm_jax.data import corpus as corpus_lib
from attnlm_jax.data import locations

DATASET_VERSION = "1.0.0"


def _quiet_tfds() -> None:
  """Turns TFDS's progress bars off and its info lines out of the log (idempotent)."""
  tfds.disable_progress_bar()
  logging_utils.quiet_libraries()


class _CorpusBuilder(tfds.core.GeneratorBasedBuilder, skip_registration=True):
  """One sentence per example from `corpus.read_split(CORPUS, manual_dir, split)`."""

  CORPUS = ""
  VERSION = tfds.core.Version(DATASET_VERSION)
  # Updated once per example written; `prepare` sets it while it builds the dataset.
  progress: tqdm.tqdm | None = None
  RELEASE_NOTES = {DATASET_VERSION: "Sentences and document indices of corpus.read_split."}

  def _info(self) -> tfds.core.DatasetInfo:
    return tfds.core.DatasetInfo(
        builder=self,
        description=f"The {self.CORPUS} corpus, one sentence per example.",
        features=tfds.features.FeaturesDict({
            "text": tfds.features.Text(),
            "document": np.int32,
        }),
        disable_shuffling=True,
        metadata=tfds.core.MetadataDict(),
    )

  def _split_generators(self, dl_manager):
    data_dir = dl_manager.manual_dir if self.MANUAL_DOWNLOAD_INSTRUCTIONS else ""
    texts = {split: corpus_lib.read_split(self.CORPUS, data_dir, split)
             for split in corpus_lib.SPLITS}
    if self.progress is not None:
      self.progress.reset(total=sum(len(text.sentences) for text in texts.values()))
    for split, text in texts.items():
      self.info.metadata[f"{split}_lines"] = text.lines
    return {split: self._generate_examples(text) for split, text in texts.items()}

  def _generate_examples(self, text: corpus_lib.SplitText):
    for index, (words, document) in enumerate(zip(text.sentences, text.documents)):
      yield index, {"text": " ".join(words), "document": document}
      if self.progress is not None:
        self.progress.update()

  def _log_download_bytes(self) -> None:
    """Nothing: TFDS prints "Downloading and preparing dataset" to stdout here."""

  def _log_download_done(self) -> None:
    """Nothing: TFDS prints "Dataset ... downloaded and prepared" to stdout here."""


class Ptb(_CorpusBuilder, skip_registration=True):
  """Penn Treebank (Mikolov's preprocessing), one line per sentence and document."""

  name = "ptb"
  CORPUS = "ptb"
  MANUAL_DOWNLOAD_INSTRUCTIONS = "Put ptb.train.txt, ptb.valid.txt and ptb.test.txt here."


class Wikitext2(_CorpusBuilder, skip_registration=True):
  """WikiText-2 (v1, tokenised), paragraphs split into sentences as corpus.read_split does."""

  name = "wikitext2"
  CORPUS = "wikitext2"
  MANUAL_DOWNLOAD_INSTRUCTIONS = (
      "Put wiki.train.tokens, wiki.valid.tokens and wiki.test.tokens here.")


class Embedded(_CorpusBuilder, skip_registration=True):
  """The grammar corpus shipped inside the package (attnlm_jax/data/embedded)."""

  name = "embedded"
  CORPUS = "embedded"


BUILDERS = {builder.CORPUS: builder for builder in (Ptb, Wikitext2, Embedded)}


def source_fingerprint(corpus: str, data_dir) -> str:
  """sha256 over the corpus's split files (missing files count as missing): the cache key."""
  digest = hashlib.sha256(f"{corpus}/{DATASET_VERSION}".encode())
  for split in corpus_lib.SPLITS:
    if corpus == "embedded":
      path = corpus_lib.embedded_dir() / corpus_lib.EMBEDDED_LAYOUT.format(split=split)
    else:
      path = corpus_lib.split_path(corpus, data_dir, split)
    exists = path.is_file()
    digest.update(f"|{split}:{exists}|".encode())
    if exists:
      digest.update(path.read_bytes())
  return digest.hexdigest()


def prepare(corpus: str, data_dir, cache_dir="") -> tfds.core.DatasetBuilder:
  """The builder of `corpus` with its array_record files prepared (built on first use).

  Args:
    corpus: one of corpus.CORPORA.
    data_dir: directory holding the corpus files ("" for the embedded corpus).
    cache_dir: where prepared datasets are kept; "" (or None) = `tfds/` in the data root
      (`locations.data_root()`).

  Returns:
    The prepared builder; `builder.as_data_source(split)` reads a split.

  Raises:
    CorpusError: unknown corpus, or unusable corpus files (see corpus.read_split).
  """
  if corpus not in BUILDERS:
    raise corpus_lib.CorpusError(f"corpus {corpus!r} is unknown: use one of "
                                 f"{', '.join(BUILDERS)}")
  if corpus != "embedded" and not (str(data_dir) and epath.Path(data_dir).is_dir()):
    # TFDS would fail on the manual directory with a multi-line AssertionError; the reader
    # raises the one-line CorpusError for a missing or unset directory instead.
    corpus_lib.read_split(corpus, data_dir, "train")
  _quiet_tfds()
  root = epath.Path(cache_dir) if cache_dir else locations.data_root() / "tfds"
  fingerprint = source_fingerprint(corpus, data_dir)
  builder = BUILDERS[corpus](data_dir=root / f"{corpus}-{fingerprint[:16]}",
                             file_format="array_record")
  if not builder.data_path.exists():
    logging.info("preparing %s as array_record in %s (once)", corpus, builder.data_dir)
    with logging_utils.progress_bar(f"preparing {corpus}", unit=" sentences") as progress:
      builder.progress = progress
      builder.download_and_prepare(download_config=tfds.download.DownloadConfig(
          manual_dir=None if corpus == "embedded" else str(data_dir),
          compute_stats=tfds.download.ComputeStatsMode.SKIP))
    builder.progress = None
  return builder


def decode_example(example: dict[str, Any]) -> tuple[tuple[str, ...], int]:
  """(words, document) of one example read from a data source of these builders.

  Real array_record data returns the text as bytes, `tfds.testing.mock_data` as str; both work.
  """
  text = example["text"]
  text = text.decode("utf-8") if isinstance(text, bytes) else str(text)
  return tuple(text.split()), int(example["document"])


def load_split_text(corpus: str, data_dir, split: str, cache_dir="") -> corpus_lib.SplitText:
  """Reads one split through TFDS (building it once into cache_dir), in example order.

  Equal to `corpus.read_split(corpus, data_dir, split)`: the same sentences, documents and
  line count.

  Raises:
    CorpusError: unknown corpus or split, or unusable corpus files.
  """
  if split not in corpus_lib.SPLITS:
    raise corpus_lib.CorpusError(f"split {split!r} is unknown: use one of "
                                 f"{', '.join(corpus_lib.SPLITS)}")
  builder = prepare(corpus, data_dir, cache_dir)
  source = builder.as_data_source(split)
  examples = [decode_example(e) for e in source.__getitems__(range(len(source)))]
  lines = builder.info.metadata.get(f"{split}_lines")
  return corpus_lib.SplitText(sentences=[words for words, _ in examples],
                              documents=[document for _, document in examples],
                              lines=None if lines is None else int(lines))
