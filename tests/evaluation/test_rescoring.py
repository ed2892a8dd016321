"""n-best rescoring: the formats, the combined score and the word error rate by hand, the
LM's sentence log-probabilities, and one-line errors for bad input."""

import json
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attnlm_jax.common.errors import UserError
from attnlm_jax import data as data_lib
from attnlm_jax.evaluation import evaluate
from attnlm_jax.evaluation import rescoring
from attnlm_jax import models
import tiny_config

NBEST = """\
u1\t-10.0\tthe cat sat
u1\t-9.5\tthe cat sad
u1\t-11.0\ta cat sat down
u2\t-4.0\thello world
u2\t-4.25\thallo world
"""
REFERENCES = "u1\tthe cat sat\nu2\thello world\n"
# A stub language model: log p_LM of each hypothesis.
LOG_PROBS = {"the cat sat": -5.0, "the cat sad": -8.0, "a cat sat down": -6.0,
             "hello world": -3.0, "hallo world": -2.0}


def parse(text, name="nbest.txt"):
  return rescoring.parse_nbest(text.splitlines(), name)


@pytest.fixture(scope="module")
def model():
  """Untrained parameters of the tiny config on the embedded corpus's vocabulary."""
  config = tiny_config.config(model__init_scale=0.5)
  vocab = data_lib.load(config.data).vocab
  config.model.vocab_size = len(vocab)
  return evaluate.TrainedModel(config, vocab, models.init(jax.random.key(0), config.model), 0)


def test_both_formats_read_the_same_hypotheses():
  tab, tab_format = parse(NBEST)
  moses_text = "".join(f"{u} ||| {t} ||| lm=1 tm=2 ||| {s}\n"
                       for u, s, t in (line.split("\t") for line in NBEST.splitlines()))
  moses, moses_format = parse(moses_text)
  assert (tab_format, moses_format) == (rescoring.TAB, rescoring.MOSES)
  assert ([(h.utterance, h.first_pass, h.text, h.line) for h in tab]
          == [(h.utterance, h.first_pass, h.text, h.line) for h in moses])
  assert moses[0].fields == ("lm=1 tm=2",) and tab[0].fields == ()


def _kaldi_dir(directory, text, ac_cost, lm_cost):
  directory.mkdir()
  for name, content in (("text", text), ("ac_cost", ac_cost), ("lm_cost", lm_cost)):
    (directory / name).write_text(content)
  return directory


KALDI_TEXT = "u1-1 the cat sat\nu1-2 the cat sad\nu1-3 a cat sat down\nu2-1 hello world\n"
KALDI_AC = "u1-1 80\nu1-2 70\nu1-3 95.5\nu2-1 30\n"
KALDI_LM = "u1-1 2.0\nu1-2 2.5\nu1-3 1.45\nu2-1 1.0\n"


def test_a_kaldi_directory_reads_as_its_first_pass_scores_by_hand(tmp_path):
  directory = _kaldi_dir(tmp_path / "nbest", KALDI_TEXT, KALDI_AC, KALDI_LM)
  hypotheses = rescoring.parse_kaldi(directory, acoustic_scale=0.1)
  # -(0.1 ac + lm): -(8 + 2) = -10, -(7 + 2.5) = -9.5, -(9.55 + 1.45) = -11, -(3 + 1) = -4.
  assert [(h.utterance, h.text, h.first_pass, h.line, h.fields) for h in hypotheses] == [
      ("u1", "the cat sat", pytest.approx(-10.0), 1, ("80", "2.0")),
      ("u1", "the cat sad", pytest.approx(-9.5), 2, ("70", "2.5")),
      ("u1", "a cat sat down", pytest.approx(-11.0), 3, ("95.5", "1.45")),
      ("u2", "hello world", pytest.approx(-4.0), 4, ("30", "1.0"))]
  assert rescoring.parse_kaldi(directory, acoustic_scale=1.0)[0].first_pass == -82.0


def test_kaldi_references_are_its_text_files_space_separated():
  assert rescoring.parse_references(["u1 the cat sat", "u2\thello world"], "ref",
                                    ["u1", "u2"]) == {"u1": ["the", "cat", "sat"],
                                                      "u2": ["hello", "world"]}


def test_a_bare_id_is_an_empty_reference():
  assert rescoring.parse_references(["u1", "u2\t", "u3 a"], "ref", ["u1", "u2", "u3"]) == {
      "u1": [], "u2": [], "u3": ["a"]}


def test_an_empty_hypothesis_is_read_in_every_format_and_ranked_by_hand(tmp_path):
  """A first pass that heard nothing: no words, log p_LM of `<eos>` alone, no word bonus."""
  tab, _ = parse("u1\t-1.0\t\nu1\t-3.0\tthe cat\n")
  moses, _ = parse("u1 |||  ||| f=1 ||| -1.0\nu1 ||| the cat ||| f=2 ||| -3.0\n")
  kaldi = rescoring.parse_kaldi(_kaldi_dir(tmp_path / "nbest", "u1-1\nu1-2 the cat\n",
                                           "u1-1 0\nu1-2 0\n", "u1-1 1.0\nu1-2 3.0\n"),
                                acoustic_scale=0.1)
  for hypotheses in (tab, moses, kaldi):
    assert [(h.text, h.words, h.first_pass) for h in hypotheses] == [
        ("", [], -1.0), ("the cat", ["the", "cat"], -3.0)]
    log_probs = {"": -1.0, "the cat": -0.5}
    # word penalty 1: "" -1 - 1 + 0 = -2, "the cat" -3 - 0.5 + 2 = -1.5; penalty 0: -2, -3.5.
    assert [(s.hypothesis.text, s.score) for s in rescoring.rerank(
        hypotheses, log_probs, lm_weight=1.0, word_penalty=1.0)["u1"]] == [
            ("the cat", -1.5), ("", -2.0)]
    assert [s.hypothesis.text for s in rescoring.rerank(
        hypotheses, log_probs, lm_weight=1.0, word_penalty=0.0)["u1"]] == ["", "the cat"]


@pytest.mark.parametrize("files, message", [
    ({"lm_cost": None}, r"nbest/lm_cost not found: a Kaldi n-best directory holds text, "
                        "ac_cost, lm_cost"),
    ({"text": "u1 the cat\n"}, r"nbest/text:1: hypothesis id 'u1' is not Kaldi's "
                               "'utterance-N'"),
    ({"text": "u1-1 a b\nu1-1 a c\n"}, r"nbest/text:2: hypothesis 'u1-1' repeats line 1"),
    ({"ac_cost": "u1-1 80\nu1-2 x\n"}, r"nbest/ac_cost:2: cost 'x' is not a number"),
    ({"lm_cost": "u1-1 2.0\n"}, r"nbest/lm_cost has no cost for 'u1-2' and 2 more "
                                "hypotheses"),
    ({"lm_cost": KALDI_LM + "u9-1 3.0\n"}, r"nbest/lm_cost:5: 'u9-1' is not a hypothesis "
                                           "of the n-best text"),
])
def test_bad_kaldi_input_names_the_file_and_line(tmp_path, files, message):
  contents = {"text": KALDI_TEXT, "ac_cost": KALDI_AC, "lm_cost": KALDI_LM, **files}
  directory = _kaldi_dir(tmp_path / "nbest", *(contents[n] or "" for n in
                                               ("text", "ac_cost", "lm_cost")))
  for name, content in contents.items():
    if content is None:
      (directory / name).unlink()
  with pytest.raises(rescoring.RescoringError, match=message):
    rescoring.parse_kaldi(directory, acoustic_scale=0.1)


def test_rescoring_reranks_as_computed_by_hand():
  hypotheses, _ = parse(NBEST)
  lists = rescoring.rerank(hypotheses, LOG_PROBS, lm_weight=0.5, word_penalty=1.0)
  # score = first pass + 0.5 log p_LM + 1.0 words:
  #   the cat sat:    -10.0 - 2.5 + 3 = -9.5     the cat sad: -9.5 - 4.0 + 3 = -10.5
  #   a cat sat down: -11.0 - 3.0 + 4 = -10.0
  #   hello world:     -4.0 - 1.5 + 2 = -3.5     hallo world: -4.25 - 1.0 + 2 = -3.25
  assert [(s.hypothesis.text, s.score) for s in lists["u1"]] == [
      ("the cat sat", -9.5), ("a cat sat down", -10.0), ("the cat sad", -10.5)]
  assert [(s.hypothesis.text, s.score) for s in lists["u2"]] == [
      ("hallo world", -3.25), ("hello world", -3.5)]


def test_word_errors_by_hand():
  errors = lambda ref, hyp: rescoring.word_errors(ref.split(), hyp.split())
  assert errors("a b c", "a b c") == 0
  assert errors("a b c", "a x c") == 1           # substitution
  assert errors("a b c", "a c") == 1             # deletion
  assert errors("a b", "x a b y") == 2           # two insertions
  assert errors("a b c d", "") == 4 and errors("", "a b") == 2
  assert errors("the cat sat", "a cat sat down") == 2


def test_word_error_rate_before_and_after_by_hand():
  hypotheses, _ = parse(NBEST)
  references = rescoring.parse_references(REFERENCES.splitlines(), "ref.txt",
                                          [h.utterance for h in hypotheses])
  _, summary = rescoring.rescore(hypotheses, LOG_PROBS, references, 0.5, 1.0)
  # Before: "the cat sad" (1 error of 3) and "hello world" (0 of 2): 1 / 5.
  # After (the ranking above): "the cat sat" (0) and "hallo world" (1): 1 / 5 again.
  assert summary["wer_before"] == pytest.approx(1 / 5)
  assert summary["wer_after"] == pytest.approx(1 / 5)
  _, summary = rescoring.rescore(hypotheses, LOG_PROBS, references, 0.2, 0.0)
  # lm_weight 0.2: u1 scores -11, -11.1, -12.2 -> "the cat sat"; u2 -4.6, -4.65 -> "hello
  # world": no error left.
  assert summary["wer_before"] == pytest.approx(1 / 5) and summary["wer_after"] == 0


def test_auto_lm_weight_is_the_smallest_with_the_lowest_error_rate():
  hypotheses, _ = parse(NBEST)
  references = {"u1": "the cat sat".split(), "u2": "hello world".split()}
  weight, grid = rescoring.choose_lm_weight(hypotheses, LOG_PROBS, references, 0.0,
                                            weights=(0.0, 0.1, 0.2, 1.0))
  # u1: "the cat sat" beats "the cat sad" iff -10 - 5w > -9.5 - 8w, i.e. w > 1/6; u2:
  # "hello world" beats "hallo world" iff -4 - 3w > -4.25 - 2w, i.e. w < 1/4. Both are
  # right (WER 0) only at w = 0.2 of this grid.
  assert [point["wer"] for point in grid] == [pytest.approx(x) for x in (0.2, 0.2, 0, 0.2)]
  assert weight == 0.2
  _, summary = rescoring.rescore(hypotheses, LOG_PROBS, references, None, 0.0)
  assert summary["lm_weight"] == 0.2 and summary["wer_after"] == 0
  assert len(summary["lm_weight_grid"]) == len(rescoring.LM_WEIGHTS)


def test_lm_log_probs_are_the_sentences_log_probabilities(model):
  texts = ["the keys to the cabinet are here", "the dog runs", "the dog runs", ""]
  found = rescoring.lm_log_probs(model, texts)
  assert sorted(found) == sorted(set(texts))
  for text, value in found.items():
    ids = np.append(model.vocab.encode(text.split()), data_lib.EOS_ID)
    inputs = jnp.asarray(np.concatenate([[data_lib.EOS_ID], ids[:-1]])[None], jnp.int32)
    logits = models.apply(model.params, model.config.model, inputs, jnp.array([len(ids)]))
    log_probs = jax.nn.log_softmax(logits[0])[np.arange(len(ids)), ids]
    assert value == pytest.approx(float(log_probs.sum()), rel=1e-5)


def test_run_writes_the_reranked_lists(model, tmp_path, monkeypatch):
  monkeypatch.setattr(rescoring.evaluate, "load", lambda workdir, config=None: model)
  (tmp_path / "nbest.txt").write_text(NBEST)
  (tmp_path / "ref.txt").write_text(REFERENCES)
  summary = rescoring.run("unused", tmp_path / "nbest.txt", tmp_path / "ref.txt",
                          tmp_path / "out" / "rescored.jsonl", "auto", 0.0)
  records = [json.loads(line)
             for line in (tmp_path / "out" / "rescored.jsonl").read_text().splitlines()]
  assert len(records) == 5 and summary["lists"] == 2 and summary["hypotheses"] == 5
  assert [r["rank"] for r in records] == [1, 2, 3, 1, 2]
  assert [r["id"] for r in records] == ["u1"] * 3 + ["u2"] * 2
  log_probs = rescoring.lm_log_probs(model, [r["text"] for r in records])
  for record in records:
    assert record["score"] == pytest.approx(record["first_pass_score"] + summary["lm_weight"]
                                            * log_probs[record["text"]])
  assert records[0]["score"] >= records[1]["score"] >= records[2]["score"]
  assert summary["wer_before"] == pytest.approx(0.2)
  assert summary["wer_after"] == min(p["wer"] for p in summary["lm_weight_grid"])


def test_run_reads_a_kaldi_directory_as_the_same_lists(model, tmp_path, monkeypatch):
  """The Kaldi directory of the tab file's u1 and u2-1 rescores as the tab file does."""
  monkeypatch.setattr(rescoring.evaluate, "load", lambda workdir, config=None: model)
  tab = "".join(line + "\n" for line in NBEST.splitlines()[:4])
  (tmp_path / "nbest.txt").write_text(tab)
  directory = _kaldi_dir(tmp_path / "nbest", KALDI_TEXT, KALDI_AC, KALDI_LM)
  outputs = {}
  for name, source in (("tab", tmp_path / "nbest.txt"), ("kaldi", directory)):
    summary = rescoring.run("unused", source, None, tmp_path / f"{name}.jsonl", "0.7", 0.5)
    outputs[name] = [json.loads(line) for line in
                     (tmp_path / f"{name}.jsonl").read_text().splitlines()]
    assert summary["format"] == name and summary["hypotheses"] == 4
  assert summary["acoustic_scale"] == rescoring.ACOUSTIC_SCALE
  strip = lambda r: (r["id"], r["rank"], r["text"], round(r["score"], 6))
  assert list(map(strip, outputs["kaldi"])) == list(map(strip, outputs["tab"]))
  assert {r["text"]: r["fields"] for r in outputs["kaldi"]} == {
      "the cat sat": ["80", "2.0"], "the cat sad": ["70", "2.5"],
      "a cat sat down": ["95.5", "1.45"], "hello world": ["30", "1.0"]}


@pytest.mark.parametrize("nbest, output", [
    ("nbest.txt", "nbest.txt"), ("nbest.txt", "ref.txt"), ("nbest", "nbest/lm_cost")])
def test_run_refuses_an_output_that_is_a_file_it_reads(tmp_path, monkeypatch, nbest, output):
  """The n-best file, the references, or a file of a Kaldi directory, before the LM loads."""
  monkeypatch.setattr(rescoring.evaluate, "load", tiny_config.must_not_run)
  (tmp_path / "nbest.txt").write_text(NBEST)
  (tmp_path / "ref.txt").write_text(REFERENCES)
  _kaldi_dir(tmp_path / "nbest", KALDI_TEXT, KALDI_AC, KALDI_LM)
  before = {p: p.read_text() for p in tmp_path.rglob("*") if p.is_file()}
  flag = "--references" if output == "ref.txt" else "--input"
  with pytest.raises(UserError, match=f"would overwrite {tmp_path / output}, read by {flag}:"):
    rescoring.run("unused", tmp_path / nbest, tmp_path / "ref.txt", str(tmp_path / output))
  assert {p: p.read_text() for p in tmp_path.rglob("*") if p.is_file()} == before


@pytest.mark.parametrize("text, message", [
    ("", "nbest.txt is empty"),
    ("u1\t-1.0\ta b\nu1\t-2.0\n", "nbest.txt:2: expected 3 tab-separated fields"),
    ("u1\t-1.0\ta b\nu1\tlow\ta c\n", "nbest.txt:2: first-pass score 'low' is not a number"),
    ("0 ||| a b ||| -1.0\n", "nbest.txt:1: expected 4 fields 'id ||| text ||| features"),
])
def test_bad_nbest_input_names_the_file_and_line(text, message):
  with pytest.raises(rescoring.RescoringError, match=message.replace("|", r"\|")):
    parse(text)


def test_a_reference_without_hypotheses_names_the_file_and_line():
  with pytest.raises(rescoring.RescoringError,
                     match="ref.txt:2: reference id 'u3' has no hypotheses"):
    rescoring.parse_references(["u1\ta b", "u3\tc d"], "ref.txt", ["u1", "u2"])


def _cli_rescore(tmp_path, nbest) -> subprocess.CompletedProcess:
  """`--mode=rescore --input=NBEST` of a workdir that does not exist (input is read first)."""
  return subprocess.run(
      [sys.executable, "-m", "attnlm_jax.main", "--mode=rescore",
       f"--workdir={tmp_path / 'no_run'}", f"--input={nbest}"],
      cwd=tiny_config.REPO, capture_output=True, text=True, timeout=300)


def test_cli_bad_nbest_is_one_error_line(tmp_path):
  (tmp_path / "nbest.txt").write_text("u1\t-1.0\ta b\nu1\t-2.0\ta b\textra\n")
  result = _cli_rescore(tmp_path, tmp_path / "nbest.txt")
  assert result.returncode == 1
  assert result.stderr.strip().splitlines() == [
      f"error: {tmp_path / 'nbest.txt'}:2: expected 3 tab-separated fields "
      "'utterance-id<TAB>score<TAB>text', got 4"]


def test_cli_bad_kaldi_directory_is_one_error_line(tmp_path):
  directory = _kaldi_dir(tmp_path / "nbest", KALDI_TEXT, KALDI_AC, KALDI_LM)
  (directory / "lm_cost").unlink()
  result = _cli_rescore(tmp_path, directory)
  assert result.returncode == 1
  assert result.stderr.strip().splitlines() == [
      f"error: {directory / 'lm_cost'} not found: a Kaldi n-best directory holds text, "
      "ac_cost, lm_cost (nbest-to-linear's outputs, the words as text)"]
