"""The dataset facade: `load(config.data)` -> `LMData` (vocabulary, training and eval batches).

Splits are read once, encoded to one flat int32 token stream each and cached; training batches
come from a grain iterator whose state a checkpoint keeps (docs/data.md, "Batches").
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import itertools
from typing import Callable, Iterator

import grain
import ml_collections
import numpy as np

from attnlm_jax.data import batching
from attnlm_jax.data import corpus as corpus_lib
from attnlm_jax.data.corpus import CorpusError, SplitText
from attnlm_jax.data.vocab import EOS_ID, Vocabulary

SOURCES = ("text", "tfds")
SPANS = ("sentence", "document", "stream")
# Data fields added since runs were first saved, with the values that keep the behaviour from
# before them (what a saved config.json without them means).
ADDED_FIELDS = {"shuffle": True, "start_symbol": True}


@dataclasses.dataclass(frozen=True)
class EncodedSplit:
  """One split as a token stream.

  Attributes:
    tokens: int32 stream, each sentence's word ids followed by EOS_ID.
    sentence_lengths: tokens (words + EOS) of each sentence.
    documents: document index of each sentence.
    oov: words of the split that are not in the vocabulary (encoded as UNK_ID).
    lines: lines of the source file, when known.
    tags: int32 stream aligned with `tokens`: the POS tag id of each token (the <eos> tag
      for EOS_ID), when `load` was given a tag source; else None.
  """
  tokens: np.ndarray
  sentence_lengths: np.ndarray
  documents: np.ndarray
  oov: int
  lines: int | None
  tags: np.ndarray | None = None


def encode_split(text: SplitText, vocab: Vocabulary) -> EncodedSplit:
  """Encodes every sentence of `text` and appends EOS_ID to each, without a per-word loop."""
  words = list(itertools.chain.from_iterable(text.sentences))
  ids, oov = vocab.encode_and_count(words)
  lengths = np.fromiter(map(len, text.sentences), dtype=np.int64,
                        count=len(text.sentences)) + 1
  tokens = np.full(int(lengths.sum()), EOS_ID, dtype=np.int32)
  is_word = np.ones(len(tokens), dtype=bool)
  is_word[np.cumsum(lengths) - 1] = False
  tokens[is_word] = ids
  return EncodedSplit(tokens=tokens, sentence_lengths=lengths,
                      documents=np.asarray(text.documents, dtype=np.int64), oov=oov,
                      lines=text.lines)


def split_batch(data: EncodedSplit, starts: np.ndarray, lengths: np.ndarray,
               width: int, start_symbol: bool = True) -> dict[str, np.ndarray]:
  """`batching.make_batch` over the split's tokens, plus "tags" [B, T] when it is tagged:
  the tag of each input token (the <eos> tag at the start position), laid out as "inputs"."""
  batch = batching.make_batch(data.tokens, starts, lengths, width, start_symbol)
  if data.tags is not None:
    batch["tags"] = batching.make_batch(data.tags, starts, lengths, width,
                                        start_symbol)["inputs"]
  return batch


def process_rows(batch_size: int, process_index: int, process_count: int) -> slice:
  """The rows of a global batch that process `process_index` of `process_count` reads.

  Process i takes the i-th contiguous block of batch_size / process_count rows, so the
  blocks of processes 0, 1, ... laid side by side are the global batch, in the order of the
  global device list (pmap's order). A batch size that does not split raises CorpusError.
  """
  if batch_size % process_count:
    raise CorpusError(f"a batch of {batch_size} rows does not split over {process_count} "
                      f"processes: use a batch size that is a multiple of {process_count}")
  rows = batch_size // process_count
  return slice(process_index * rows, (process_index + 1) * rows)


def eval_batches(data: EncodedSplit, units: tuple[np.ndarray, np.ndarray], batch_size: int,
                 process_index: int = 0, process_count: int = 1, start_symbol: bool = True
                 ) -> Iterator[tuple[np.ndarray, dict[str, np.ndarray]]]:
  """(unit indices, batch) of evaluation batches over the `units` (starts, lengths) of `data`.

  Every unit is one whole row (never truncated), longest first, each batch padded to its
  longest row and filled up to `batch_size` with filler rows (index -1, length 0). With
  `process_count` processes each gets only its rows of every batch (`process_rows`).
  `start_symbol`: as `batching.make_batch`'s.
  """
  starts, lengths = units
  for rows in batching.eval_plan(lengths, batch_size):
    row_lengths = batching.row_lengths(rows, lengths)
    mine = process_rows(len(rows), process_index, process_count)
    yield rows[mine], split_batch(data, starts[np.maximum(rows[mine], 0)], row_lengths[mine],
                                  int(row_lengths.max()), start_symbol)


def _check_config(config: ml_collections.ConfigDict) -> None:
  """Rejects data settings that cannot work, with a one-line CorpusError."""
  choices = {"corpus": corpus_lib.CORPORA, "source": SOURCES, "span": SPANS}
  for field, allowed in choices.items():
    if config[field] not in allowed:
      raise CorpusError(f"config.data.{field}={config[field]!r} is unknown: use one of "
                        f"{', '.join(allowed)}")
  for field in ("batch_size", "eval_batch_size", "max_len", "width_multiple"):
    if config.get(field, 1) < 1:
      raise CorpusError(f"config.data.{field}={config[field]} must be a positive integer")
  if config.span == "stream" and config.bucket:
    raise CorpusError("config.data.bucket=True does not apply to config.data.span='stream' "
                      "(the stream is read in consecutive windows): set "
                      "--config.data.bucket=false")
  if not config.get("start_symbol", ADDED_FIELDS["start_symbol"]) and config.span != "sentence":
    raise CorpusError("config.data.start_symbol=False (a row starts with the sentence's first "
                      "word) applies to config.data.span='sentence' only")
  if not config.get("shuffle", ADDED_FIELDS["shuffle"]) and config.bucket:
    raise CorpusError("config.data.shuffle=False (batches in corpus order) leaves nothing to "
                      "bucket: set --config.data.bucket=false")


def _split_reader(config: ml_collections.ConfigDict) -> Callable[[str], SplitText]:
  """split -> SplitText from the configured source."""
  if config.source == "tfds":
    from attnlm_jax.data import tfds_builders  # pylint: disable=g-import-not-at-top
    return functools.partial(tfds_builders.load_split_text, config.corpus, config.data_dir,
                             cache_dir=config.get("cache_dir", ""))
  return functools.partial(corpus_lib.read_split, config.corpus, config.data_dir)


# Tags the sentences of a split: (split, sentences) -> per sentence the tag ids of its words
# followed by the <eos> tag (`tagger.tagging.corpus_tags` makes one from a trained tagger).
TagSource = Callable[[str, list], list]


def load(data_config: ml_collections.ConfigDict, vocab: Vocabulary | None = None,
         tag_source: TagSource | None = None) -> "LMData":
  """Reads the training split and returns the dataset facade.

  Args:
    data_config: config.data (corpus, data_dir, source, batch_size, eval_batch_size,
      max_len, bucket, span, seed; optional cache_dir for source="tfds" ("": `tfds/` in the
      data root) and width_multiple for bucketing).
    vocab: the vocabulary to use (e.g. restored with a checkpoint); built from the training
      split when None.
    tag_source: the POS tags of each split (a `tags` stream beside its tokens), or None.

  Returns:
    The LMData; valid and test are read on first use.

  Raises:
    CorpusError: bad settings or unusable corpus files.
  """
  _check_config(data_config)
  reader = _split_reader(data_config)
  train = reader(split="train")
  vocab = vocab if vocab is not None else Vocabulary.build(train.sentences)
  return LMData(data_config, vocab, reader, train, tag_source)


class LMData:
  """A corpus encoded with a vocabulary: sentences, training iterators and eval batches."""

  def __init__(self, config: ml_collections.ConfigDict, vocab: Vocabulary,
               reader: Callable[[str], SplitText], train: SplitText,
               tag_source: TagSource | None = None):
    """Use `load`; `reader(split=...)` reads valid/test on first use."""
    self.config = config
    self.vocab = vocab
    self._reader = reader
    self._tag_source = tag_source
    self._splits = {"train": self._encode(train, "train")}
    self._units = {}
    self._released_counts = {}
    self._train_batches = None  # `first_batches`: the batches an epoch is cut to.

  def split(self, split: str) -> EncodedSplit:
    """The encoded split (read and encoded on first use)."""
    if split not in corpus_lib.SPLITS:
      raise CorpusError(f"split {split!r} is unknown: use one of "
                        f"{', '.join(corpus_lib.SPLITS)}")
    if split not in self._splits:
      self._splits[split] = self._encode(self._reader(split=split), split)
    return self._splits[split]

  def _encode(self, text: SplitText, split: str) -> EncodedSplit:
    """`encode_split`, plus the `tags` stream from the tag source, if any."""
    encoded = encode_split(text, self.vocab)
    if self._tag_source is None:
      return encoded
    tags = self._tag_source(split, text.sentences)
    return dataclasses.replace(encoded, tags=np.concatenate(tags).astype(np.int32))

  def sentences(self, split: str) -> list[np.ndarray]:
    """The encoded sentences of `split`, each its word ids followed by EOS_ID."""
    data = self.split(split)
    return np.split(data.tokens, np.cumsum(data.sentence_lengths)[:-1])

  def units(self, split: str) -> tuple[np.ndarray, np.ndarray]:
    """(starts, lengths) of the batch rows of `split` under config.span (see `batching`)."""
    if split not in self._units:
      data = self.split(split)
      if self.config.span == "document":
        self._units[split] = batching.document_units(
            data.sentence_lengths, data.documents, self.config.max_len)
      else:
        self._units[split] = batching.sentence_units(data.sentence_lengths)
        if not self.start_symbol:  # The first word is an input, never a target.
          starts, lengths = self._units[split]
          self._units[split] = (starts + 1, lengths - 1)
    return self._units[split]

  def released_count(self, split: str) -> int:
    """The number of tokens the released code divides the perplexity of `split` by (the
    papers' convention, `losses.perplexities`): every token of every sentence, `<eos>`
    included; on WikiText-2, every token of the rows its own pipeline splits the file into
    (`corpus.released_count`: 2.3% more than this project's sentences on valid and test)."""
    if split not in self._released_counts:
      if self.config.corpus == "wikitext2":
        self._released_counts[split] = corpus_lib.released_count(self.config.data_dir, split)
      else:
        self._released_counts[split] = len(self.split(split).tokens)
    return self._released_counts[split]

  @property
  def start_symbol(self) -> bool:
    """Whether each sentence row starts with the start symbol (config.start_symbol), so that
    its first word is predicted; without it the first word is the first input."""
    return self.config.get("start_symbol", ADDED_FIELDS["start_symbol"])

  @property
  def is_stream(self) -> bool:
    """True under the stream protocol (config.span "stream"): rows are carried windows."""
    return self.config.span == "stream"

  def stream_rows(self, split: str, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
    """(starts, lengths) of the `batch_size` contiguous stream rows of `split`."""
    return batching.stream_rows(len(self.split(split).tokens), batch_size)

  def num_windows(self, split: str, batch_size: int) -> int:
    """Windows of config.max_len tokens that read `split` as `batch_size` streams."""
    return batching.num_stream_windows(self.stream_rows(split, batch_size)[1],
                                       self.config.max_len)

  def train_tokens_per_epoch(self) -> int:
    """Tokens predicted in one whole training epoch: the whole stream under the stream
    protocol, else every unit (sentence, document span) truncated to max_len."""
    if self.is_stream:
      return len(self.split("train").tokens)
    return int(np.minimum(self.units("train")[1], self.config.max_len).sum())

  def first_batches(self, num_batches: int) -> "LMData":
    """This corpus with every training epoch cut to its first `num_batches` batches (the
    same batches, in the same order), valid and test whole: the epoch benchmark times the
    training loop on it."""
    if not 0 < num_batches <= self.num_train_batches():
      raise CorpusError(f"{num_batches} batches asked of an epoch of "
                        f"{self.num_train_batches()}: ask for 1 to {self.num_train_batches()}")
    view = copy.copy(self)
    view._train_batches = num_batches  # pylint: disable=protected-access
    return view

  def num_train_batches(self) -> int:
    """Batches in one training epoch (the last one is completed with filler rows; under the
    stream protocol: the windows of the training stream)."""
    if self._train_batches is not None:
      return self._train_batches
    if self.is_stream:
      return self.num_windows("train", self.config.batch_size)
    return -(-len(self.units("train")[0]) // self.config.batch_size)

  def _stream_windows(self, split: str, batch_size: int, process_index: int,
                      process_count: int) -> grain.MapDataset:
    """The windows of `split` read as `batch_size` streams, in order; each process gets its
    rows of every window (`process_rows`)."""
    data = self.split(split)
    starts, lengths = self.stream_rows(split, batch_size)
    mine = process_rows(batch_size, process_index, process_count)
    width = self.config.max_len

    def window(index: int) -> dict[str, np.ndarray]:
      offset = index * width
      return split_batch(data, starts[mine] + offset,
                         np.clip(lengths[mine] - offset, 0, width), width, start_symbol=False)

    return grain.MapDataset.range(self.num_windows(split, batch_size)).map(window)

  def train_plan(self, epoch: int) -> np.ndarray:
    """The unit indices [num_batches, batch_size] of the epoch's batches (-1: filler)."""
    _, lengths = self.units("train")
    plan = batching.train_plan(lengths, self.config.batch_size, self.config.seed, epoch,
                               self.config.bucket, self.config.max_len,
                               self.config.get("shuffle", ADDED_FIELDS["shuffle"]))
    return plan[:self._train_batches]

  def train_iterator(self, epoch: int, process_index: int = 0,
                     process_count: int = 1) -> grain.DatasetIterator:
    """A grain iterator over the training batches of `epoch` (`get_state()` / `set_state()`).

    Rows are truncated to max_len and padded to `_train_width` of the whole global batch; with
    `process_count` processes each reads only its rows of every batch (`process_rows`).
    """
    options = grain.ReadOptions(num_threads=1, prefetch_buffer_size=8)
    if self.is_stream:
      windows = self._stream_windows("train", self.config.batch_size, process_index,
                                     process_count)[:self.num_train_batches()]
      return iter(windows.to_iter_dataset(options))
    data = self.split("train")
    starts, lengths = self.units("train")

    def collate(rows: np.ndarray) -> dict[str, np.ndarray]:
      row_lengths = batching.row_lengths(rows, lengths, self.config.max_len)
      width = int(self._train_width(row_lengths.max()))
      mine = process_rows(len(rows), process_index, process_count)
      return split_batch(data, starts[np.maximum(rows[mine], 0)], row_lengths[mine], width,
                         self.start_symbol)

    dataset = grain.MapDataset.source(list(self.train_plan(epoch))).map(collate)
    return iter(dataset.to_iter_dataset(options))

  def _train_width(self, longest):
    """Positions of a training batch whose longest row has `longest` tokens (elementwise on
    an array): max_len, or with bucketing `batching.bucket_width`."""
    if not self.config.bucket:
      return np.full_like(longest, self.config.max_len)
    return batching.bucket_width(longest, self.config.get("width_multiple", 1),
                                 self.config.max_len)

  def train_widths(self, epoch: int) -> list[int]:
    """The distinct widths (positions) of the training batches of `epoch`, the same in every
    process; under the stream protocol the one window width."""
    if self.is_stream:
      return [self.config.max_len]
    longest = batching.row_lengths(self.train_plan(epoch), self.units("train")[1],
                                   self.config.max_len).max(axis=1)
    return sorted(set(self._train_width(longest).tolist()))

  def eval_batches(self, split: str, batch_size: int, process_index: int = 0,
                   process_count: int = 1) -> Iterator[dict[str, np.ndarray]]:
    """Evaluation batches covering every token of `split` once (docs/data.md, "Evaluation").

    With `process_count` processes each yields only its rows of every batch (`process_rows`).
    Under the stream protocol: the windows of `split` read as `batch_size` streams, in order.
    """
    if self.is_stream:
      yield from self._stream_windows(split, batch_size, process_index, process_count)
      return
    for _, batch in eval_batches(self.split(split), self.units(split), batch_size,
                                 process_index, process_count, self.start_symbol):
      yield batch
