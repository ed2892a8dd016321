"""The left-to-right POS tagger: normalisation, no look-ahead, learning, the tag cache."""

import collections
import json
import runpy
import shutil
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attnlm_jax import data as data_lib
from attnlm_jax.common import errors
from attnlm_jax.data import batching
from attnlm_jax.data import vocab as vocab_lib
from attnlm_jax.evaluation import evaluate
from attnlm_jax import models
from attnlm_jax.tagger import corpora as tagger_corpora
from attnlm_jax.tagger import model as tagger_model
from attnlm_jax.tagger import tagging
from attnlm_jax.tagger import trainer as tagger_trainer
from attnlm_jax.training import checkpoints
from attnlm_jax.training import run_config
import tiny_config

CONFIG = runpy.run_path("configs/tagger.py")["get_config"]


def tiny_model_config():
  config = CONFIG().model
  config.update(embed_size=8, suffix_size=4, hidden_size=12, num_layers=2, dropout=0.0,
                suffix_lengths=(1, 2, 3), prefix_lengths=(), use_shape=False)
  return config


@pytest.mark.parametrize("word, want", [
    ("1.8", "N"), ("1,000", "N"), ("3\\/4", "N"), ("10-15", "N"), ("%", "N"), ("N", "N"),
    ("30-year", "30-year"), ("1980s", "1980s"), ("Boeing", "boeing"), ("'s", "'s"),
    ("<unk>", "<unk>"), ("-", "-")])
def test_normalize_follows_the_ptb_files(word, want):
  assert tagger_corpora.normalize(word) == want


def test_read_conll_drops_punctuation_and_normalises(tmp_path):
  path = tmp_path / "train.txt"
  path.write_text("He PRP B-NP\nsold VBD B-VP\n1,000 CD B-NP\n, , O\nShares NNS I-NP\n"
                  ". . O\n\n`` `` O\nYes UH O\n")
  assert tagger_corpora.read_conll(path) == [(("he", "sold", "N", "shares"),
                                          ("PRP", "VBD", "CD", "NNS")),
                                         (("yes",), ("UH",))]
  assert len(tagger_corpora.read_conll(path, drop_punctuation=False)[0][0]) == 6


def test_a_malformed_tagged_file_is_refused_in_one_line(tmp_path):
  path = tmp_path / "train.txt"
  path.write_text("He PRP B-NP\nsold\n")
  with pytest.raises(tagger_corpora.TaggerError,
                     match=r"train.txt: line 2 is 'sold', not 'word POS chunk'"):
    tagger_corpora.read_conll(path)
  (tmp_path / "wsj_0001.pos").write_bytes(b"[ caf\xe9/NN ]\n")      # Latin-1, not UTF-8
  with pytest.raises(tagger_corpora.TaggerError,
                     match=r"wsj_0001.pos: byte 0xe9 at offset 5 \(line 1\) is not UTF-8"):
    tagger_corpora.read_treebank_pos(tmp_path)


def test_missing_conll_file_names_the_download_command(tmp_path):
  with pytest.raises(tagger_corpora.TaggerError) as e:
    tagger_corpora.read_conll(tmp_path / "missing" / "train.txt")
  assert str(e.value) == (
      f'{tmp_path}/missing/train.txt not found: download CoNLL-2000 with "python -m '
      'attnlm_jax.data.download --corpus=conll2000" or pass --config.data.data_dir=DIR, the '
      'directory holding train.txt and test.txt')
  # The corpus's place under another data root: the command downloads into that root.
  with pytest.raises(tagger_corpora.TaggerError) as e:
    tagger_corpora.read_conll(tmp_path / "pos" / "conll2000" / "test.txt")
  assert f'--corpus=conll2000 --data_dir={tmp_path}" or pass' in str(e.value)


def test_later_words_never_change_earlier_tag_predictions():
  config = tiny_model_config()
  params = tagger_model.init(jax.random.key(0), config, num_words=30, num_suffixes=20,
                           num_tags=9)
  params = jax.tree.map(lambda x: x + 0.5 * jax.random.normal(jax.random.key(1), x.shape),
                        params)
  rng = np.random.default_rng(0)
  words = jnp.asarray(rng.integers(0, 30, (2, 7)), jnp.int32)
  endings = jnp.asarray(rng.integers(0, 20, (2, 7, 3)), jnp.int32)
  base = tagger_model.apply(params, config, words, endings)
  for t in range(6):
    moved = tagger_model.apply(params, config, words.at[:, t + 1:].set((words[:, t + 1:] + 5) % 30),
                             endings.at[:, t + 1:].set((endings[:, t + 1:] + 3) % 20))
    np.testing.assert_allclose(moved[:, :t + 1], base[:, :t + 1], atol=1e-6)
    assert not np.allclose(moved[:, t + 1:], base[:, t + 1:])


def test_read_treebank_pos_splits_sentences_at_the_full_stop(tmp_path):
  (tmp_path / "wsj_0001.pos").write_text(
      "======================================\n\n[ Pierre/NNP Vinken/NNP ]\n,/, \n"
      "[ 61/CD years/NNS ]\nold/JJ ./. \n\n[ a/DT 1\\/2/CD ]\n\n[ that/WDT ]\n"
      "targeting/VBG|NN summer\\/winter/NN ./. \n")
  assert tagger_corpora.read_treebank_pos(tmp_path) == [
      (("pierre", "vinken", "N", "years", "old"), ("NNP", "NNP", "CD", "NNS", "JJ")),
      (("a", "N", "that", "targeting", "summer\\/winter"), ("DT", "CD", "WDT", "VBG", "NN"))]
  with pytest.raises(tagger_corpora.TaggerError,
                     match=r'"python -m attnlm_jax\.data\.download --corpus=treebank_sample", '
                           r'pass --config\.data\.treebank_dir=DIR, .* or '
                           r'--config\.data\.treebank_dir= \(empty\) to train on CoNLL-2000 alone'):
    tagger_corpora.read_treebank_pos(tmp_path / "missing")


def test_word_features_are_suffixes_prefixes_and_shape():
  config = CONFIG().model
  config.update(suffix_lengths=(1, 3), prefix_lengths=(2,), use_shape=True)
  assert tagger_model.word_features("30-year", config) == ["1:r", "3:ear", "p2:30", "s:dh6"]
  assert tagger_model.word_features("<unk>", config) == ["<unk>"] * 4


def test_suffixes_are_the_word_endings():
  assert tagger_model.suffixes("running", (1, 2, 3)) == ["1:g", "2:ng", "3:ing"]
  assert tagger_model.suffixes("<unk>", (1, 3)) == ["<unk>", "<unk>"]


def conll_slice(source, target, num_sentences):
  blocks = source.read_text().split("\n\n")[:num_sentences]
  target.write_text("\n\n".join(blocks) + "\n")


@pytest.fixture(scope="module")
def trained(shared_data, tmp_path_factory):
  """A tiny tagger trained for a few seconds on 500 CoNLL-2000 sentences."""
  data = tmp_path_factory.mktemp("conll")
  conll_slice(shared_data / "pos" / "conll2000" / "train.txt", data / "train.txt", 500)
  conll_slice(shared_data / "pos" / "conll2000" / "test.txt", data / "test.txt", 100)
  config = CONFIG()
  config.data.data_dir = str(data)
  config.data.treebank_dir = ""
  config.data.lm_data_dir = str(shared_data / "ptb")
  config.model.update(embed_size=32, suffix_size=8, hidden_size=64)
  config.train.update(learning_rate=1e-2, num_epochs=5)
  workdir = tmp_path_factory.mktemp("tagger")
  return tagger_trainer.train_tagger(config, workdir), workdir


def test_tiny_training_run_learns_far_above_the_majority_tag(trained):
  metrics, _ = trained
  assert metrics["majority_baseline"] < 0.25
  assert metrics["test_accuracy"] > 0.6


def test_the_tagger_learns_the_words_the_lm_text_shows_and_tags_its_unk_from_context(
    trained, shared_data, tmp_path):
  """With `lm_data_dir`, training words outside PTB's vocabulary read as <unk> (the saved
  word list holds PTB words only), and the test's <unk> are tagged better than any one tag
  for every <unk> could (what a tagger blind to context does)."""
  metrics, workdir = trained
  ptb = tagger_corpora.lm_words(shared_data / "ptb")
  assert len(ptb) == 9_999 and "<unk>" in ptb     # and <eos>, the LM's own: 10,000
  words = json.loads((workdir / "tagger.json").read_text())["words"]
  assert set(words) - set(vocab_lib.SPECIALS) <= ptb and len(words) > 500
  conll_slice(shared_data / "pos" / "conll2000" / "test.txt", tmp_path / "test.txt", 100)
  test = tagger_corpora.as_lm_text(tagger_corpora.read_conll(tmp_path / "test.txt"), ptb)
  unk_tags = collections.Counter(tag for sentence, tags in test
                                 for word, tag in zip(sentence, tags) if word == vocab_lib.UNK)
  one_tag = unk_tags.most_common(1)[0][1] / sum(unk_tags.values())
  assert sum(unk_tags.values()) > 50 and metrics["test_accuracy_unk"] > one_tag


def test_a_missing_lm_corpus_names_the_flag_that_fixes_it(tmp_path):
  with pytest.raises(tagger_corpora.TaggerError) as e:
    tagger_corpora.lm_words(tmp_path / "missing")
  assert "--config.data.lm_data_dir=DIR" in str(e.value) and "\n" not in str(e.value)
  assert "--corpus=ptb" in str(e.value)


def test_lm_text_reads_the_words_outside_the_lm_vocabulary_as_unk():
  sentences = [(("the", "zyxt", "said", "N"), ("DT", "NNP", "VBD", "CD"))]
  assert tagger_corpora.as_lm_text(sentences, frozenset({"the", "said", "N"})) == [
      (("the", "<unk>", "said", "N"), ("DT", "NNP", "VBD", "CD"))]


def test_accuracy_at_one_word_counts_only_that_word(random_tagger):
  sentences = [(("a", "b", "a"), ("DT", "DT", "NN"))]
  predicted = [("DT", "NN", "NN")]                 # both "a" right, "b" wrong
  assert tagger_model.accuracy_of(predicted, sentences) == pytest.approx(2 / 3)
  assert tagger_model.accuracy_of(predicted, sentences, only="a") == 1.0
  assert tagger_model.accuracy_of(predicted, sentences, only="b") == 0.0
  tagger = tagging.load(random_tagger)           # `accuracy` scores the tagger's own tags:
  own = tagger_model.tag(tagger, [("a", "b", "a")])[0]
  other = lambda tag: next(t for t in tagger.tags if t != tag)
  tagged = [(("a", "b", "a"), (own[0], other(own[1]), other(own[2])))]  # right at the first
  assert tagger_model.accuracy(tagger, tagged) == pytest.approx(1 / 3)
  assert tagger_model.accuracy(tagger, tagged, only="a") == 0.5
  assert tagger_model.accuracy(tagger, tagged, only="b") == 0.0
  assert tagger_model.accuracy(tagger, tagged, only="zzz") is None


def test_tagging_a_corpus_is_cached_and_aligned_with_the_lm_sentences(trained):
  _, workdir = trained
  tagger = tagging.load(workdir)
  sentences = [["the", "company", "said", "N", "<unk>"], ["it", "sold", "shares"]]
  first = tagging.tag_corpus(workdir, "ptb", "valid", sentences)
  path = tagging.cache_path(workdir, "ptb", "valid")
  assert path.read_text().splitlines() == [" ".join(t) for t in tagger_model.tag(tagger,
                                                                               sentences)]
  eos_tag = tagger.tags.index(vocab_lib.EOS)
  assert [len(s) for s in first] == [6, 4] and all(s[-1] == eos_tag for s in first)
  path.write_text("DT NN VBD CD NN\nPRP VBD NNS\n")      # the cache is what is read back
  again = tagging.tag_corpus(workdir, "ptb", "valid", sentences)
  assert [tagger.tags[i] for i in again[1]] == ["PRP", "VBD", "NNS", vocab_lib.EOS]
  path.write_text("DT NN VBD CD\nPRP VBD NNS NNS\n")   # as many lines, other sentences
  tagging.tag_corpus(workdir, "ptb", "valid", sentences)
  assert path.read_text().splitlines() == [" ".join(t) for t in tagger_model.tag(tagger,
                                                                               sentences)]


def test_the_command_line_ends_with_the_saved_accuracy(shared_data, tmp_path):
  """--mode=train_tagger (docs/training.md) prints its accuracy as the last JSON line, the
  metrics saved with the tagger."""
  data = tmp_path / "conll"
  data.mkdir()
  conll_slice(shared_data / "pos" / "conll2000" / "train.txt", data / "train.txt", 60)
  conll_slice(shared_data / "pos" / "conll2000" / "test.txt", data / "test.txt", 20)
  workdir = tmp_path / "tagger"
  done = subprocess.run(
      [sys.executable, "-m", "attnlm_jax.main", "--mode=train_tagger",
       "--config=configs/tagger.py", f"--workdir={workdir}", f"--config.data.data_dir={data}",
       "--config.data.treebank_dir=", "--config.model.hidden_size=8",
       "--config.train.num_epochs=1"],
      cwd=tiny_config.REPO, capture_output=True, text=True, timeout=300)
  assert done.returncode == 0, done.stderr[-3000:]
  lines = done.stdout.splitlines()
  assert json.loads(lines[0])["epoch"] == 1
  last = json.loads(lines[-1])
  saved = (workdir / "tagger.json").read_text()
  assert last == json.loads(saved)["metrics"]
  assert 0.0 < last["test_accuracy"] <= 1.0
  again = subprocess.run(done.args, cwd=tiny_config.REPO, capture_output=True, text=True,
                         timeout=300)
  assert again.returncode == 1
  assert again.stderr.strip().splitlines() == [
      f"error: {workdir} already holds a trained tagger, which the models trained on its "
      f"tags need: pass a new --workdir (or remove {workdir} to train it again)"]
  assert (workdir / "tagger.json").read_text() == saved          # the tagger is kept


@pytest.mark.parametrize("train_text, override, message", [
    ("\n\n", {}, "no tagged train sentences in"),
    ("He PRP B-NP\n", {"data.batch_size": 0}, "config.data.batch_size = 0 must be at least 1"),
    ("He PRP B-NP\n", {"train.num_epochs": 0}, "config.train.num_epochs = 0 must be at least 1"),
    ("He PRP B-NP\n", {"data.max_train_sentences": -1},
     r"config.data.max_train_sentences = -1 must be at least 0 \(0: all\)"),
    ("He PRP B-NP\n", {"train.learning_rate": 0.0},
     "config.train.learning_rate = 0.0 must be a positive number"),
    ("He PRP B-NP\n", {"train.learning_rate": float("nan")},
     "config.train.learning_rate = nan must be a positive number"),
    ("He PRP B-NP\n", {"train.grad_clip": 0.0}, "config.train.grad_clip = 0.0 must be a"),
    ("He PRP B-NP\n", {"train.ema_decay": 1.0},
     r"config.train.ema_decay = 1.0 must be in \[0, 1\)"),
    ("He PRP B-NP\n", {"train.ema_decay": -0.1}, "config.train.ema_decay = -0.1 must be in"),
    ("He PRP B-NP\n", {"seed": -1}, "config.seed = -1 must be at least 0")])
def test_a_tagger_that_could_not_train_is_refused_in_one_line(tmp_path, train_text, override,
                                                              message):
  (tmp_path / "train.txt").write_text(train_text)
  (tmp_path / "test.txt").write_text("He PRP B-NP\n")
  config = CONFIG()
  config.data.data_dir = str(tmp_path)
  config.data.treebank_dir = ""
  config.data.lm_data_dir = ""
  config.model = tiny_model_config()
  for key, value in override.items():
    *section, field = key.split(".")
    (config[section[0]] if section else config)[field] = value
  with pytest.raises(errors.UserError, match=message):
    tagger_trainer.train_tagger(config, tmp_path / "tagger")
  assert not (tmp_path / "tagger").exists()


def test_a_damaged_tagger_is_a_one_line_error(random_tagger, tmp_path):
  broken = tmp_path / "tagger"
  shutil.copytree(random_tagger, broken)
  (broken / tagging.META_FILE).write_text('{"config": ')             # cut short
  with pytest.raises(tagger_corpora.TaggerError, match=r"tagger.json is not one JSON value"):
    tagging.load(broken)
  (broken / tagging.PARAMS_FILE).unlink()
  with pytest.raises(tagger_corpora.TaggerError, match=r"has no tagger.msgpack: train it again"):
    tagging.load(broken)


def test_missing_tagger_is_a_one_line_error(tmp_path):
  with pytest.raises(tagger_corpora.TaggerError, match="train one with --mode=train_tagger"):
    tagging.load(tmp_path)


@pytest.fixture(scope="module")
def random_tagger(tmp_path_factory):
  """An untrained tagger with large random weights (varied tags) over the embedded corpus."""
  config = tiny_model_config()
  config.update(prefix_lengths=(1, 2), use_shape=True)
  sentences = data_lib.read_split("embedded", "", "train").sentences
  words = data_lib.Vocabulary.build(sentences)
  items = data_lib.Vocabulary.build(
      [tagger_model.word_features(w, config) for s in sentences for w in s])
  tags = tagger_model.TAG_SPECIALS + ("DT", "NN", "VBZ", "JJ", "IN")
  params = tagger_model.init(jax.random.key(0), config, len(words), len(items), len(tags))
  params = jax.tree.map(lambda x: x + 0.5 * jax.random.normal(jax.random.key(1), x.shape),
                        params)
  workdir = tmp_path_factory.mktemp("random_tagger")
  tagging.save(tagger_model.Tagger(params, config, words, items, tags), workdir, {})
  return workdir


def test_lm_batches_carry_the_tag_of_each_input_token(random_tagger):
  config = tiny_config.config(data__tagger_dir=str(random_tagger), data__eval_batch_size=64)
  assert tagging.corpus_tags(config) is None       # a model without tag inputs tags nothing
  config.model.pos_tags = True
  lm_data = data_lib.load(config.data, tag_source=tagging.corpus_tags(config))
  sentences = data_lib.read_split("embedded", "", "valid").sentences
  expected = tagger_model.tag_ids(tagging.load(random_tagger), sentences)
  _, lengths = lm_data.units("valid")
  rows = batching.eval_plan(lengths, 64)[0]
  batch = next(lm_data.eval_batches("valid", 64))
  assert batch["tags"].shape == batch["inputs"].shape
  for r, index in enumerate(rows):
    n = len(sentences[index])
    np.testing.assert_array_equal(batch["inputs"][r, 1:n + 1],
                                  lm_data.vocab.encode(sentences[index]))
    assert batch["tags"][r, 0] == vocab_lib.EOS_ID           # the start symbol's tag
    np.testing.assert_array_equal(batch["tags"][r, 1:n + 1], expected[index])
    assert not batch["tags"][r, n + 1:].any()                 # padding
  train_batch = next(lm_data.train_iterator(1))
  inputs, tags = train_batch["inputs"], train_batch["tags"]
  assert tags.shape == inputs.shape
  assert np.all((inputs == vocab_lib.EOS_ID) == (tags == vocab_lib.EOS_ID))
  assert np.all((inputs == vocab_lib.PAD_ID) == (tags == vocab_lib.PAD_ID))


def test_the_tags_of_a_sentence_never_depend_on_its_later_words(random_tagger):
  tagger = tagging.load(random_tagger)
  sentences = [list(s) for s in data_lib.read_split("embedded", "", "valid").sentences[:40]]
  full = tagger_model.tag_ids(tagger, sentences)
  changed = 0
  for k in range(1, 6):
    edited = [s[:k] + ["zebra"] + s[k + 1:] if len(s) > k else s for s in sentences]
    tags = tagger_model.tag_ids(tagger, edited)
    for before, after, sentence in zip(full, tags, sentences):
      np.testing.assert_array_equal(after[:k], before[:k])
      changed += len(sentence) > k and after[k] != before[k]
  assert changed > 0                                          # the edited word's tag moves



def test_a_model_refuses_a_tagger_other_than_the_one_it_trained_with(random_tagger, tmp_path):
  """Its workdir keeps its tagger's fingerprint; a tagger trained again there is refused."""
  tagger_dir = tmp_path / "tagger"
  shutil.copytree(random_tagger, tagger_dir)
  config = tiny_config.config(model__score="das", model__pos_tags=True,
                              data__tagger_dir=str(tagger_dir))
  workdir = tmp_path / "lm"
  checkpoints.write_config_and_vocab(workdir, config, data_lib.Vocabulary.build([["a"]]))
  checkpoints.check_tagger(workdir, config.data)            # the same tagger
  tagger = tagging.load(tagger_dir)
  moved = jax.tree.map(lambda x: x + 1.0, tagger.params)
  tagging.save(tagger_model.Tagger(moved, tagger.config, tagger.words, tagger.suffixes,
                                   tagger.tags), tagger_dir, {})
  with pytest.raises(checkpoints.CheckpointError,
                     match=r"is not the one this model trained with .*tagger_fingerprint\.txt"):
    checkpoints.check_tagger(workdir, config.data)


def test_a_moved_workdir_reads_the_tagger_beside_it(random_tagger, tmp_path):
  """A table's rows keep their tagger beside them: moved (to another machine, another path),
  a row's saved tagger_dir is found again beside it, the same tagger by its fingerprint; with
  none there, a one-line error says where to copy it."""
  before = tmp_path / "before"
  shutil.copytree(random_tagger, before / "tagger")
  config = tiny_config.config(model__score="das", model__pos_tags=True,
                              data__tagger_dir=str(before / "tagger"))
  checkpoints.write_config_and_vocab(before / "lm", config, data_lib.Vocabulary.build([["a"]]))
  after = tmp_path / "after"
  before.rename(after)
  moved = evaluate._saved_config(after / "lm")
  assert moved.data.tagger_dir == str(after / "tagger")
  checkpoints.check_tagger(after / "lm", moved.data)
  shutil.rmtree(after / "tagger")
  with pytest.raises(checkpoints.CheckpointError) as missing:
    evaluate._saved_config(after / "lm")
  assert str(missing.value) == (
      f"{after / 'lm' / checkpoints.CONFIG_FILE}'s tagger_dir {before / 'tagger'} is not a "
      f"directory here, nor is {after / 'tagger'}: copy the tagger the model trained with to "
      f"{after / 'tagger'}")


@pytest.fixture(scope="module")
def tagged_lm(random_tagger):
  """An untrained DAS LM with POS-tag inputs from `random_tagger`, as a restored model."""
  config = tiny_config.config(model__score="das", model__pos_tags=True, model__tag_size=6,
                              data__tagger_dir=str(random_tagger), data__eval_batch_size=4)
  vocab = data_lib.Vocabulary.build(data_lib.read_split("embedded", "", "train").sentences)
  config = run_config.complete(config, len(vocab))
  params = models.init(jax.random.key(0), config=config.model)
  params = jax.tree.map(lambda x: x + 0.3 * jax.random.normal(jax.random.key(1), x.shape),
                        params)
  return evaluate.TrainedModel(config, vocab, params, 0)


def test_scoring_with_tags_never_looks_at_later_words(tagged_lm):
  assert tagged_lm.config.model.num_tags == 7
  full, edited, prefix = evaluate.score(tagged_lm, ["the keys to the cabinet are here",
                                                    "the keys to the dog is here",
                                                    "the keys to"])
  np.testing.assert_allclose(full["log_probs"][:3], prefix["log_probs"][:3], atol=1e-5)
  np.testing.assert_allclose(full["log_probs"][:4], edited["log_probs"][:4], atol=1e-5)
  # "here" and <eos>, the same words after the edit, are predicted from it.
  assert not np.allclose(full["log_probs"][6:], edited["log_probs"][6:])


def test_an_empty_sentence_scores_its_eos_alone_or_beside_others(tagged_lm):
  """An n-best list's empty hypothesis (`keep_blank`): tagging has no word to tag."""
  (alone,) = evaluate.score(tagged_lm, [""], keep_blank=True)
  _, beside = evaluate.score(tagged_lm, ["the keys", ""], keep_blank=True)
  assert alone["tokens"] == beside["tokens"] == ["<eos>"]
  assert alone["log_prob"] == pytest.approx(beside["log_prob"], abs=1e-5)
  assert alone["log_prob"] < 0


def test_sampling_with_tags_is_reproducible(tagged_lm):
  first = evaluate.generate(tagged_lm, "the keys", 8, 1.0, 3)
  assert len(first) == 8 and first == evaluate.generate(tagged_lm, "the keys", 8, 1.0, 3)
  assert first != evaluate.generate(tagged_lm, "the keys", 8, 1.0, 4)


def test_pos_tags_without_a_tagger_is_a_one_line_error():
  config = tiny_config.config(model__pos_tags=True)
  with pytest.raises(tagger_corpora.TaggerError, match="--config.data.tagger_dir=TAGGER_DIR"):
    run_config.complete(config, 100)
