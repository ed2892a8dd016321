"""Readers for the corpora: Penn Treebank, WikiText-2 and the embedded corpus.

Each reader turns one split into a `SplitText`: tokenised sentences (without `<eos>`) and the
document each sentence belongs to. Each corpus's rules (WikiText-2's sentences, headings and
documents): docs/data.md, "Corpora and layouts"; bad input raises `CorpusError`.
"""

from __future__ import annotations

import dataclasses
import importlib.resources

from etils import epath

from attnlm_jax.common import errors
from attnlm_jax.common import text_files
from attnlm_jax.data import locations
from attnlm_jax.data import released_wikitext

CORPORA = ("ptb", "wikitext2", "embedded")
SPLITS = ("train", "valid", "test")

# File name pattern of each on-disk layout.
LAYOUTS = {"ptb": "ptb.{split}.txt", "wikitext2": "wiki.{split}.tokens"}
# The embedded corpus's files in `embedded_dir()`, as `grammar.py` writes them: each split's
# sentences, and the agreement probe set (docs/analysis.md, "The agreement probe").
EMBEDDED_LAYOUT = "{split}.txt.gz"
AGREEMENT_FILE = "agreement.jsonl.gz"
# Words that end a WikiText-2 sentence when they stand alone.
SENTENCE_ENDS = frozenset((".", "?", "!"))


class CorpusError(errors.UserError, ValueError):
  """Unusable corpus input; the message is one line naming the file and the fix."""


@dataclasses.dataclass(frozen=True)
class SplitText:
  """One split of a corpus as tokenised sentences.

  Attributes:
    sentences: the words of each sentence, without `<eos>`.
    documents: the document index of each sentence (non-decreasing, from 0).
    lines: number of lines in the source file (blank lines included), when known; the
      README convention counts one `<eos>` per line, i.e. `words + lines` tokens.
  """
  sentences: list[tuple[str, ...]]
  documents: list[int]
  lines: int | None = dataclasses.field(default=None, compare=False)


def embedded_dir():
  """The package directory holding the embedded corpus files (an importlib Traversable)."""
  return importlib.resources.files("attnlm_jax.data") / "embedded"


def split_path(corpus: str, data_dir, split: str) -> epath.Path:
  """The file that holds `split` of an on-disk corpus (`ptb` or `wikitext2`) in `data_dir`."""
  return epath.Path(data_dir) / LAYOUTS[corpus].format(split=split)


def detect(data_dir) -> str:
  """The corpus whose layout `data_dir` holds; "embedded" when `data_dir` is empty.

  Raises:
    CorpusError: the directory is missing or holds neither layout.
  """
  if not str(data_dir):
    return "embedded"
  directory = _existing_dir(data_dir, "pass --config.data.data_dir=DIR, the directory "
                                      "holding ptb.train.txt or wiki.train.tokens")
  for corpus in LAYOUTS:
    if split_path(corpus, directory, "train").is_file():
      return corpus
  for sub in sorted(p for p in directory.iterdir() if p.is_dir()):
    for corpus in LAYOUTS:
      if split_path(corpus, sub, "train").is_file():
        raise CorpusError(f"{directory} holds no corpus files, but {sub} holds {corpus}: "
                          f"use --config.data.data_dir={sub}")
  raise CorpusError(f"{directory} holds neither ptb.train.txt nor wiki.train.tokens: pass "
                    "the --config.data.data_dir that holds them, or "
                    "--config.data.corpus=embedded")


def read_split(corpus: str, data_dir, split: str) -> SplitText:
  """Reads one split of a corpus.

  Args:
    corpus: one of CORPORA.
    data_dir: directory holding the corpus files (str or path; ignored for `embedded`).
    split: one of SPLITS.

  Returns:
    The split's sentences and document indices.

  Raises:
    CorpusError: unknown corpus or split, missing directory or file, another corpus's
      layout, an empty file, or bytes that are not UTF-8.
  """
  lines = _read_lines(corpus, data_dir, split)
  if corpus == "wikitext2":
    sentences, documents = _wikitext_sentences(lines)
  else:
    sentences = [tuple(words) for words in map(str.split, lines) if words]
    documents = list(range(len(sentences)))
  return SplitText(sentences=sentences, documents=documents, lines=len(lines))


def released_count(data_dir, split: str) -> int:
  """The number of tokens the released code divides the perplexity of WikiText-2's `split`
  by (`released_wikitext.token_count`): its words, lines and released rows.

  Raises:
    CorpusError: as `read_split`.
  """
  return released_wikitext.token_count(_read_lines("wikitext2", data_dir, split))


def _read_lines(corpus: str, data_dir, split: str) -> list[str]:
  """The lines of a split's file, without their line ends (a final empty line dropped)."""
  if corpus not in CORPORA:
    raise CorpusError(f"corpus {corpus!r} is unknown: use one of {', '.join(CORPORA)}")
  if split not in SPLITS:
    raise CorpusError(f"split {split!r} is unknown: use one of {', '.join(SPLITS)}")
  if corpus == "embedded":
    name, data = _read_embedded(split)
  else:
    path = _find_split_file(corpus, data_dir, split)
    name, data = str(path), path.read_bytes()
  text = text_files.decode(name, data, CorpusError)
  if not text.strip():
    raise CorpusError(f"{name} is empty: replace it with the corpus file "
                      "(one sentence or paragraph per line)")
  return text_files.split_lines(text)


def _read_embedded(split: str) -> tuple[str, bytes]:
  """Returns (name, decompressed bytes) of the embedded corpus file of `split`."""
  resource = embedded_dir() / EMBEDDED_LAYOUT.format(split=split)
  name = str(resource)
  if not resource.is_file():
    raise CorpusError(f"{name} is missing from the package: generate it with "
                      "`python -m attnlm_jax.data.grammar`")
  return name, text_files.gunzip(name, resource.read_bytes(), CorpusError,
                                 "is not a valid gzip file",
                                 "regenerate it with `python -m attnlm_jax.data.grammar`")


def _find_split_file(corpus: str, data_dir, split: str) -> epath.Path:
  """Checks the directory layout and returns the split's file; CorpusError otherwise."""
  expected = LAYOUTS[corpus].format(split="{train,valid,test}")
  fix = f"pass --config.data.data_dir=DIR, the directory holding {expected}"
  if not str(data_dir):
    raise CorpusError(f"no data_dir given for corpus {corpus}: {fix}")
  fix = f"{locations.download_hint(corpus, data_dir)} or {fix}"
  directory = _existing_dir(data_dir, fix)
  path = split_path(corpus, directory, split)
  if path.is_file():
    return path
  for other, pattern in LAYOUTS.items():
    if other != corpus and (directory / pattern.format(split="train")).is_file():
      raise CorpusError(f"{directory} holds the {other} layout "
                        f"({pattern.format(split='*')}), not {expected}: use "
                        f"--config.data.corpus={other}, or point --config.data.data_dir at "
                        f"the {corpus} files")
  for sub in sorted(p for p in directory.iterdir() if p.is_dir()):
    if split_path(corpus, sub, split).is_file():
      raise CorpusError(f"{path} not found, but {sub} holds the {corpus} files: use "
                        f"--config.data.data_dir={sub}")
  raise CorpusError(f"{path} not found: {fix}")


def _existing_dir(data_dir, fix: str) -> epath.Path:
  """`data_dir` as a path; CorpusError ending in `fix` when it is not an existing directory."""
  directory = epath.Path(data_dir)
  if not directory.is_dir():
    problem = "is a file, not a directory" if directory.exists() else "does not exist"
    raise CorpusError(f"data directory {directory} {problem}: {fix}")
  return directory


def _heading_level(lines: list[list[str]], i: int) -> int:
  """Heading level of WikiText line i (`= = Title = =` -> 2), 0 if it is not a heading.

  A heading has the same number of standalone `=` on each side and blank lines around it
  (which tells it apart from a formula line such as `= 1 m / s =` inside a paragraph).
  """
  words = lines[i]
  if len(words) < 3 or words[0] != "=" or words[-1] != "=":
    return 0
  if (i > 0 and lines[i - 1]) or (i + 1 < len(lines) and lines[i + 1]):
    return 0
  title = [j for j, word in enumerate(words) if word != "="]
  if not title:
    return 0
  left, right = title[0], len(words) - 1 - title[-1]
  return left if left == right else 0


def _wikitext_sentences(lines: list[str]) -> tuple[list[tuple[str, ...]], list[int]]:
  """Splits WikiText lines into sentences and numbers the documents (docs/data.md)."""
  lines = [line.split() for line in lines]
  sentences, documents = [], []
  document = 0
  for i, words in enumerate(lines):
    if not words:
      continue
    level = _heading_level(lines, i)
    if level:
      if level == 1 and sentences:
        document += 1
      sentences.append(tuple(words))
      documents.append(document)
      continue
    ends = [j + 1 for j, w in enumerate(words) if w in SENTENCE_ENDS]
    if not ends or ends[-1] != len(words):
      ends.append(len(words))
    start = 0
    for end in ends:
      sentences.append(tuple(words[start:end]))
      documents.append(document)
      start = end
  return sentences, documents
