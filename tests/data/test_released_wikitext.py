"""The released code's WikiText-2 token count (attnlm_jax.data.released_wikitext): a file
worked by hand, the rule of one line, the real splits against the probe that ran the released
scripts themselves, and the evaluation dividing by it."""

import json
import math

import jax
import pytest

from attnlm_jax import data as data_lib
from attnlm_jax import models
from attnlm_jax.data import corpus
from attnlm_jax.data import pipeline
from attnlm_jax.data import released_wikitext
from attnlm_jax.training import parallel
from attnlm_jax.training import steps
import tiny_config

PROBE_OUTPUT = (tiny_config.COMMITTED_RESULTS / "salton_wt2" / "probes" / "released_count"
                / "output.jsonl")

# The hand-worked file of the probe's README (WikiText layout: " text \n" lines).
FIXTURE = (" \n = Test Article = \n \n The cat sat . It was 3 @.@ 5 m long . \n \n"
           " = = History = = \n \n It rained . Did it stop ? Yes . \n \n"
           " A line without a full stop \n")


def _write_wikitext(directory, text=FIXTURE):
  directory.mkdir(parents=True, exist_ok=True)
  for split in corpus.SPLITS:
    (directory / f"wiki.{split}.tokens").write_text(text, encoding="utf-8")
  return directory


def test_the_hand_worked_file(tmp_path):
  """W = 36 words, L = 10 lines, R = 13 rows: 5 blank-line rows, 2 headings, 2 + 3 rows of
  the paragraphs (Punkt does not cut at "@.@"), 1 line without a full stop."""
  directory = _write_wikitext(tmp_path)
  assert corpus.released_count(directory, "valid") == 36 + 10 + 13
  text = corpus.read_split("wikitext2", directory, "valid")
  assert sum(map(len, text.sentences)) + len(text.sentences) == 36 + 8   # this project's
  splitter = released_wikitext.english_sentence_splitter()
  rows = [released_wikitext.rows_of_line(line, splitter) for line in FIXTURE.split("\n")[:-1]]
  assert rows == [1, 1, 1, 2, 1, 1, 1, 3, 1, 1]


def test_a_line_gives_its_pieces_less_the_lone_eos_piece():
  """The pieces of "line \\n<eos>" with the last two joined; a blank line is one row."""
  seen = []

  def splitter(text):  # a sentence ends at " | " and at the line end
    seen.append(text)
    return text.replace("\n", " | ").split(" | ")

  assert released_wikitext.rows_of_line(" a . | b . ", splitter) == 2
  assert released_wikitext.rows_of_line(" a b ", splitter) == 1
  assert released_wikitext.rows_of_line("", splitter) == 1
  assert released_wikitext.rows_of_line(" 3 @.@ 5 ", splitter) == 1
  assert seen == ["a . | b . \n<eos>", "a b \n<eos>", "<eos>", "3 &numb 5 \n<eos>"]
  assert released_wikitext.token_count([" a . | b . ", ""], splitter) == 5 + 2 + 3


@pytest.mark.parametrize("split", ["valid", "test"])
def test_real_splits_count_what_the_released_scripts_count(shared_data, split):
  """Equal to `released_count` of the probe's output, which ran the released
  pre_process_wikitext.py and data_reader.py themselves on the same files."""
  probe = {row["split"]: row for row in map(json.loads, PROBE_OUTPUT.read_text().splitlines())
           if "split" in row}
  assert corpus.released_count(shared_data / "wikitext-2", split) == (
      probe[split]["released_count"])


def test_the_evaluation_divides_the_paper_convention_by_the_released_count(
    tmp_path, monkeypatch):
  """Same numerator, denominator 59 instead of this project's 44 tokens: the paper
  convention's log is 44/59 of what it is when divided by the tokens."""
  config = tiny_config.config(data__corpus="wikitext2",
                              data__data_dir=str(_write_wikitext(tmp_path)))
  data = data_lib.load(config.data)
  config.model.vocab_size = len(data.vocab)
  params = parallel.replicate(models.init(jax.random.key(0), config.model))
  evaluate = steps.Evaluator(config.model)
  released = evaluate(params, data, "test", 1000)
  assert (data.released_count("test"), released["tokens"]) == (59, 44)
  monkeypatch.setattr(pipeline.LMData, "released_count",
                      lambda self, split: len(self.split(split).tokens))
  by_tokens = evaluate(params, data, "test", 1000)
  assert math.log(released["perplexity_paper_convention"]) * 59 == pytest.approx(
      math.log(by_tokens["perplexity_paper_convention"]) * 44, rel=1e-9)
  assert released["perplexity"] == by_tokens["perplexity"]


def test_other_corpora_count_every_token_of_every_sentence():
  data = data_lib.load(tiny_config.config().data)
  assert data.released_count("valid") == len(data.split("valid").tokens) == (
      sum(map(len, data.sentences("valid"))))
