"""The tagged corpora the tagger trains on, read into the form of the PTB language-modelling
files (Mikolov's preprocessing): numbers, `%` and `N` become `N`, other words are lower-cased,
and (by default) punctuation tokens, absent from the PTB files, are dropped."""

import re

from etils import epath

from attnlm_jax.common import errors
from attnlm_jax.common import text_files
from attnlm_jax.data import corpus as corpus_lib
from attnlm_jax.data import locations
from attnlm_jax.data import vocab as vocab_lib

PUNCTUATION_TAGS = frozenset({",", ".", ":", "``", "''", "(", ")"})
_NUMBER = re.compile(r"[\d.,:/\\-]*\d[\d.,:/\\-]*")


class TaggerError(errors.UserError):
  """A tagger file or corpus that cannot be used; the message names the file and the fix."""


def normalize(word: str) -> str:
  """The PTB form of a word: numbers (and `%`) -> `N`, everything else lower-cased."""
  if word in ("N", "%") or _NUMBER.fullmatch(word):
    return "N"
  return word.lower()


def read_conll(path, drop_punctuation: bool = True) -> list[tuple[tuple, tuple]]:
  """Sentences of a CoNLL-2000 file (`word POS chunk` per line) as (words, tags), normalised."""
  path = epath.Path(path)
  if not path.exists():
    raise TaggerError(f"{path} not found: {locations.download_hint('conll2000', path.parent)} "
                      "or pass --config.data.data_dir=DIR, the directory holding train.txt "
                      "and test.txt")
  sentences, words, tags = [], [], []
  for number, line in enumerate(text_files.read_lines(path, TaggerError) + [""], 1):
    fields = line.split()
    if len(fields) == 1:
      raise TaggerError(f"{path}: line {number} is {line.strip()!r}, not 'word POS chunk': "
                        "pass the CoNLL-2000 chunking file (one token per line, a blank line "
                        "between sentences)")
    if fields:
      if not (drop_punctuation and fields[1] in PUNCTUATION_TAGS):
        words.append(normalize(fields[0]))
        tags.append(fields[1])
    elif words:
      sentences.append((tuple(words), tuple(tags)))
      words, tags = [], []
  return sentences


def read_treebank_pos(directory, drop_punctuation: bool = True) -> list[tuple[tuple, tuple]]:
  """Sentences of Penn Treebank `.pos` files (`word/TAG` tokens, `[ ]` chunk brackets) as
  (words, tags), normalised like `read_conll`.

  A sentence ends after a token tagged `.`; an ambiguous tag `A|B` reads as `A`.
  """
  files = sorted(epath.Path(directory).glob("*.pos"))
  if not files:
    raise TaggerError(f"no *.pos files in {directory}: "
                      f"{locations.download_hint('treebank_sample', directory)}, pass "
                      "--config.data.treebank_dir=DIR, a directory of Penn Treebank tagged "
                      "files, or --config.data.treebank_dir= (empty) to train on CoNLL-2000 "
                      "alone")
  sentences, words, tags = [], [], []
  for path in files:
    for item in text_files.decode(str(path), path.read_bytes(), TaggerError).split():
      word, slash, tag = item.rpartition("/")
      if not slash or not word or item.startswith("====="):
        continue
      tag = tag.split("|")[0]
      if not (drop_punctuation and tag in PUNCTUATION_TAGS):
        words.append(normalize(word))  # `summer\/winter` keeps its escape, as PTB does.
        tags.append(tag)
      if tag == "." and words:
        sentences.append((tuple(words), tuple(tags)))
        words, tags = [], []
    if words:
      sentences.append((tuple(words), tuple(tags)))
      words, tags = [], []
  return sentences


def lm_words(data_dir) -> frozenset:
  """The words of the training split of the LM corpus in `data_dir` (PTB's 9,999, `<unk>`
  among them): the only words an LM of that corpus shows its tagger."""
  try:
    corpus = corpus_lib.detect(data_dir)
    sentences = corpus_lib.read_split(corpus, data_dir, "train").sentences
  except corpus_lib.CorpusError as e:
    raise TaggerError(f"no LM corpus (ptb.train.txt or wiki.train.tokens) in {data_dir}, "
                      "whose vocabulary the tagger's words are read in: "
                      f"{locations.download_hint('ptb', data_dir)}, pass "
                      "--config.data.lm_data_dir=DIR (the corpus the tags are for), or "
                      "--config.data.lm_data_dir= (empty) to keep every word") from e
  return frozenset(w for s in sentences for w in s)


def as_lm_text(sentences: list[tuple[tuple, tuple]],
               words: frozenset) -> list[tuple[tuple, tuple]]:
  """The (words, tags) sentences as an LM corpus with vocabulary `words` shows them: every
  other word read as `<unk>` (PTB replaced its rare words so; their spelling is lost)."""
  return [(tuple(w if w in words else vocab_lib.UNK for w in sentence), tags)
          for sentence, tags in sentences]


def training_sentences(data_config) -> list[tuple[tuple, tuple]]:
  """The tagger's training sentences: CoNLL-2000's train.txt in `data_config.data_dir` (the
  first `max_train_sentences`, 0 = all), then the Penn Treebank `.pos` files of
  `data_config.treebank_dir` ('' = none)."""
  sentences = read_conll(epath.Path(data_config.data_dir) / "train.txt",
                         data_config.drop_punctuation)
  sentences = sentences[:data_config.max_train_sentences or None]
  if data_config.get("treebank_dir"):
    sentences += read_treebank_pos(data_config.treebank_dir, data_config.drop_punctuation)
  return sentences
