"""Sequence units, batch plans and padded batches over an encoded split.

A split is one flat int32 token stream (each sentence's word ids, then EOS_ID). A *unit* is a
contiguous range of it that becomes one batch row (a sentence, or a document span); a *plan* is
an int array [num_batches, batch_size] of unit indices, -1 marking filler rows (docs/data.md,
"Batches"). The stream protocol (Zaremba et al. 2015) reads `stream_rows` in windows of `width`
tokens instead (docs/training.md, "The stream protocol").
"""

from __future__ import annotations

import numpy as np

from attnlm_jax.data.vocab import EOS_ID, PAD_ID

# Bucketing sorts the units by length within pools of this many batches.
POOL_BATCHES = 100


def sentence_units(sentence_lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """(starts, lengths) of one unit per sentence, from its tokens (words + EOS), in stream order."""
  lengths = np.asarray(sentence_lengths, dtype=np.int64)
  starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
  return starts, lengths


def document_units(sentence_lengths: np.ndarray, documents: np.ndarray,
                   span: int) -> tuple[np.ndarray, np.ndarray]:
  """Packs consecutive whole sentences of one document into units of at most `span` tokens.

  Sentences are taken in order; a unit ends at a document boundary or when the next
  sentence would take it past `span`. A sentence longer than `span` is a unit of its own.

  Args:
    sentence_lengths: tokens (words + EOS) of each sentence, in stream order.
    documents: document index of each sentence.
    span: the most tokens a unit of several sentences may hold.

  Returns:
    (starts, lengths): stream offset and token count of each unit.
  """
  sentence_starts, sentence_lengths = sentence_units(sentence_lengths)
  starts, lengths = [], []
  current_doc, current_len = None, 0
  for start, length, doc in zip(sentence_starts.tolist(), sentence_lengths.tolist(),
                                np.asarray(documents).tolist()):
    if doc == current_doc and current_len + length <= span:
      current_len += length
      lengths[-1] = current_len
    else:
      starts.append(start)
      lengths.append(length)
      current_doc, current_len = doc, length
  return np.asarray(starts, dtype=np.int64), np.asarray(lengths, dtype=np.int64)


def _fill(order: np.ndarray, batch_size: int) -> np.ndarray:
  """Cuts `order` into rows of `batch_size`, the last row filled up with -1."""
  num_batches = -(-len(order) // batch_size)
  plan = np.full(num_batches * batch_size, -1, dtype=np.int64)
  plan[:len(order)] = order
  return plan.reshape(num_batches, batch_size)


def train_plan(lengths: np.ndarray, batch_size: int, seed: int, epoch: int,
               bucket: bool, max_len: int, shuffle: bool = True) -> np.ndarray:
  """The batches of one training epoch: every unit exactly once, in an order that depends on
  (seed, epoch) only (docs/data.md, "Training"); without `shuffle`, in corpus order,
  consecutive units in a batch, as the released code of Salton et al. (2017) reads them.

  Args:
    lengths: token count of each unit.
    batch_size: rows per batch.
    seed: the data seed.
    epoch: the epoch number.
    bucket: whether to group units of similar length (in pools of POOL_BATCHES batches).
    max_len: training truncation length (bucketing sorts by the truncated length).
    shuffle: whether to shuffle (else `bucket` must be off).

  Returns:
    int64 [num_batches, batch_size] unit indices; -1 marks filler rows (last batch only
    without bucketing; one batch somewhere in the epoch with it).
  """
  if not shuffle:
    return _fill(np.arange(len(lengths)), batch_size)
  rng = np.random.default_rng([seed, epoch])
  order = rng.permutation(len(lengths))
  if not bucket:
    return _fill(order, batch_size)
  truncated = np.minimum(lengths, max_len)
  pool = POOL_BATCHES * batch_size
  sorted_order = np.concatenate([
      order[i:i + pool][np.argsort(truncated[order[i:i + pool]], kind="stable")]
      for i in range(0, len(order), pool)])
  plan = _fill(sorted_order, batch_size)
  return plan[rng.permutation(len(plan))]


def eval_plan(lengths: np.ndarray, batch_size: int) -> np.ndarray:
  """The evaluation batches: every unit once, longest first (so batches pad little).

  Returns:
    int64 [num_batches, batch_size] unit indices; -1 fills the last batch.
  """
  return _fill(np.argsort(-np.asarray(lengths), kind="stable"), batch_size)


def row_lengths(plan: np.ndarray, lengths: np.ndarray,
                max_len: int | None = None) -> np.ndarray:
  """Predicted tokens of each plan row: the unit's length truncated to `max_len`, 0 for filler."""
  rows = np.where(plan >= 0, np.asarray(lengths)[np.maximum(plan, 0)], 0)
  return rows if max_len is None else np.minimum(rows, max_len)


def bucket_width(longest, multiple: int = 1, max_len: int | None = None):
  """Positions of a bucketed batch whose longest row has `longest` tokens: rounded up to a
  multiple of `multiple` (so a jitted step compiles for few widths), at most `max_len`.

  Works elementwise on an array of `longest` too.
  """
  width = -(-np.asarray(longest) // multiple) * multiple
  return width if max_len is None else np.minimum(width, max_len)


def pad_fraction(rows: np.ndarray, width: int | None = None, multiple: int = 1,
                 max_len: int | None = None) -> float:
  """Fraction of padded positions over batches with the given row lengths.

  Args:
    rows: [num_batches, batch_size] row lengths (from `row_lengths`).
    width: every batch padded to this many positions; None pads each to its `bucket_width`
      (its longest row rounded up to `multiple`, at most `max_len`).
    multiple: see `bucket_width`.
    max_len: see `bucket_width`.

  Returns:
    1 - real tokens / all positions.
  """
  widths = (bucket_width(rows.max(axis=1), multiple, max_len) if width is None
            else np.full(len(rows), width))
  return float(1.0 - rows.sum() / (widths.sum() * rows.shape[1]))


def stream_rows(num_tokens: int, num_rows: int) -> tuple[np.ndarray, np.ndarray]:
  """(starts, lengths) of `num_rows` contiguous rows covering a stream of `num_tokens` once:
  ceil(num_tokens / num_rows) tokens each, the last rows shorter (possibly empty)."""
  row_length = -(-num_tokens // num_rows)
  starts = np.arange(num_rows, dtype=np.int64) * row_length
  return starts, np.clip(num_tokens - starts, 0, row_length)


def num_stream_windows(row_lengths: np.ndarray, width: int) -> int:
  """Windows of `width` tokens that read the longest row to its end."""
  return int(-(-int(np.max(row_lengths, initial=0)) // width))


def make_batch(tokens: np.ndarray, starts: np.ndarray, lengths: np.ndarray,
               width: int, start_symbol: bool = True) -> dict[str, np.ndarray]:
  """Builds one padded batch from units of the token stream.

  Row r predicts tokens[starts[r] : starts[r] + lengths[r]]: `targets` holds them and
  `inputs` holds EOS_ID followed by the same tokens shifted right by one; both are padded
  with PAD_ID after `lengths[r]` up to `width` positions (filler rows: length 0, all PAD_ID).
  Without `start_symbol` the first input is the stream's token before the row (EOS_ID, the
  start symbol, only at the stream's start).

  Args:
    tokens: the split's flat int32 token stream.
    starts: stream offset of each row's unit.
    lengths: predicted tokens of each row (already truncated; at most `width`).
    width: number of positions T.
    start_symbol: start every row with EOS_ID (a row is a whole unit) rather than with the
      stream's previous token (a row continues the stream).

  Returns:
    {"inputs": int32 [B, T], "targets": int32 [B, T], "lengths": int32 [B]}.
  """
  positions = np.arange(width)
  mask = positions[None, :] < lengths[:, None]
  index = np.asarray(starts)[:, None] + positions[None, :]
  last = len(tokens) - 1
  targets = np.where(mask, tokens[np.clip(index, 0, last)], PAD_ID)
  first = (positions[None, :] == 0) if start_symbol else (index == 0)
  previous = np.where(first, EOS_ID, tokens[np.clip(index - 1, 0, last)])
  inputs = np.where(mask, previous, PAD_ID)
  return {"inputs": inputs.astype(np.int32), "targets": targets.astype(np.int32),
          "lengths": np.asarray(lengths, dtype=np.int32)}
