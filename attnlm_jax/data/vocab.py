"""Word vocabulary: the id <-> word map built from a training split.

Ids 0, 1, 2 are `<pad>`, `<eos>` (also the start symbol) and `<unk>`, then the words by
decreasing training count, ties alphabetical (docs/data.md, "Vocabulary").
"""

from __future__ import annotations

import collections
import hashlib
import itertools
import json
from typing import Iterable, Sequence

from etils import epath
import numpy as np

from attnlm_jax.common import errors
from attnlm_jax.common import json_io

PAD, EOS, UNK = "<pad>", "<eos>", "<unk>"
PAD_ID, EOS_ID, UNK_ID = 0, 1, 2
SPECIALS = (PAD, EOS, UNK)


class VocabularyError(errors.UserError, ValueError):
  """A vocabulary file that cannot be used; the message is one line naming the file."""


class Vocabulary:
  """An id -> word list with specials first, and the inverse word -> id map."""

  def __init__(self, words: Sequence[str]):
    """Wraps `words` (id -> word), which must start with `<pad>`, `<eos>`, `<unk>`."""
    words = list(words)
    if tuple(words[:len(SPECIALS)]) != SPECIALS:
      raise VocabularyError(
          f"vocabulary starts with {words[:len(SPECIALS)]}, expected {list(SPECIALS)}: "
          "build it with Vocabulary.build")
    self.words = words
    self._index = {w: i for i, w in enumerate(words)}
    if len(self._index) != len(words):
      raise VocabularyError("vocabulary lists a word twice: build it with Vocabulary.build")

  @classmethod
  def build(cls, sentences: Iterable[Sequence[str]], min_count: int = 1) -> Vocabulary:
    """Builds the vocabulary of the words in `sentences` (the training split).

    Args:
      sentences: tokenised sentences without `<eos>`; a literal `<unk>` or `<eos>` in the
        text is the special of that name.
      min_count: the fewest occurrences a word needs to be kept (the rarer read as `<unk>`).

    Returns:
      The specials, then the words by decreasing count, ties in alphabetical order.
    """
    counts = collections.Counter(itertools.chain.from_iterable(sentences))
    for special in SPECIALS:
      counts.pop(special, None)
    ordered = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return cls(list(SPECIALS) + [w for w, n in ordered if n >= min_count])

  def __len__(self) -> int:
    """Number of ids, specials included."""
    return len(self.words)

  def __eq__(self, other: object) -> bool:
    """Two vocabularies are equal when they map the same ids to the same words."""
    return isinstance(other, Vocabulary) and self.words == other.words

  def __hash__(self) -> int:
    """Hash of the word list (consistent with `__eq__`)."""
    return hash(tuple(self.words))

  def encode_and_count(self, words: Sequence[str]) -> tuple[np.ndarray, int]:
    """Maps words to int32 ids, unknown words to UNK_ID.

    Args:
      words: the words to encode (a literal `<unk>` is known: it is UNK_ID itself).

    Returns:
      (ids, number of words that were not in the vocabulary).
    """
    ids = np.fromiter(map(self._index.get, words, itertools.repeat(-1)),
                      dtype=np.int32, count=len(words))
    unknown = ids < 0
    ids[unknown] = UNK_ID
    return ids, int(unknown.sum())

  def unknown_words(self, words: Sequence[str]) -> list[str]:
    """The words (in order, without repeats) that are not in the vocabulary."""
    return list(dict.fromkeys(w for w in words if w not in self._index))

  def encode(self, words: Sequence[str]) -> np.ndarray:
    """Maps words to int32 ids; words outside the vocabulary map to UNK_ID."""
    return self.encode_and_count(words)[0]

  def decode(self, ids) -> list[str]:
    """Maps ids (any integer sequence or array) back to words."""
    return [self.words[i] for i in np.asarray(ids, dtype=np.int64).reshape(-1)]

  def save(self, path) -> None:
    """Writes the word list as JSON to `path` (str, Path or etils.epath.Path, e.g. gs://)."""
    epath.Path(path).write_text(json.dumps({"words": self.words}, ensure_ascii=False))

  @classmethod
  def load(cls, path) -> Vocabulary:
    """Reads a vocabulary written by `save`."""
    path = epath.Path(path)
    fix = "write it with Vocabulary.save"
    try:
      saved = json_io.read_json(path, VocabularyError, fix)
    except FileNotFoundError:
      raise VocabularyError(f"{path} not found: pass the vocab.json saved with the "
                            "checkpoint") from None
    try:
      words = saved["words"]
    except (KeyError, TypeError) as e:
      raise VocabularyError(f"{path} is not a saved vocabulary ({type(e).__name__}): "
                            f"{fix}") from None
    return cls(words)

  def fingerprint(self) -> str:
    """A stable hash (16 hex digits of SHA-256) of the word list, for checkpoint checks."""
    return hashlib.sha256("\n".join(self.words).encode("utf-8")).hexdigest()[:16]
