"""The left-to-right POS tagger: normalisation, no look-ahead, learning, the tag cache."""

import runpy

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attnlm_jax import tagger as tagger_lib
from attnlm_jax.data import vocab as vocab_lib

CONFIG = runpy.run_path("configs/tagger.py")["get_config"]


def tiny_model_config():
  config = CONFIG().model
  config.update(embed_size=8, suffix_size=4, hidden_size=12, num_layers=2, dropout=0.0)
  return config


@pytest.mark.parametrize("word, want", [
    ("1.8", "N"), ("1,000", "N"), ("3\\/4", "N"), ("10-15", "N"), ("%", "N"), ("N", "N"),
    ("30-year", "30-year"), ("1980s", "1980s"), ("Boeing", "boeing"), ("'s", "'s"),
    ("<unk>", "<unk>"), ("-", "-")])
def test_normalize_follows_the_ptb_files(word, want):
  assert tagger_lib.normalize(word) == want


def test_read_conll_drops_punctuation_and_normalises(tmp_path):
  path = tmp_path / "train.txt"
  path.write_text("He PRP B-NP\nsold VBD B-VP\n1,000 CD B-NP\n, , O\nShares NNS I-NP\n"
                  ". . O\n\n`` `` O\nYes UH O\n")
  assert tagger_lib.read_conll(path) == [(("he", "sold", "N", "shares"),
                                          ("PRP", "VBD", "CD", "NNS")),
                                         (("yes",), ("UH",))]
  assert len(tagger_lib.read_conll(path, drop_punctuation=False)[0][0]) == 6


def test_later_words_never_change_earlier_tag_predictions():
  config = tiny_model_config()
  params = tagger_lib.init(jax.random.key(0), config, num_words=30, num_suffixes=20,
                           num_tags=9)
  params = jax.tree.map(lambda x: x + 0.5 * jax.random.normal(jax.random.key(1), x.shape),
                        params)
  rng = np.random.default_rng(0)
  words = jnp.asarray(rng.integers(0, 30, (2, 7)), jnp.int32)
  endings = jnp.asarray(rng.integers(0, 20, (2, 7, 3)), jnp.int32)
  base = tagger_lib.apply(params, config, words, endings)
  for t in range(6):
    moved = tagger_lib.apply(params, config, words.at[:, t + 1:].set((words[:, t + 1:] + 5) % 30),
                             endings.at[:, t + 1:].set((endings[:, t + 1:] + 3) % 20))
    np.testing.assert_allclose(moved[:, :t + 1], base[:, :t + 1], atol=1e-6)
    assert not np.allclose(moved[:, t + 1:], base[:, t + 1:])


def test_suffixes_are_the_word_endings():
  assert tagger_lib.suffixes("running", (1, 2, 3)) == ["1:g", "2:ng", "3:ing"]
  assert tagger_lib.suffixes("<unk>", (1, 3)) == ["<unk>", "<unk>"]


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
  config.model.update(embed_size=32, suffix_size=8, hidden_size=64)
  config.train.update(learning_rate=1e-2, num_epochs=5)
  workdir = tmp_path_factory.mktemp("tagger")
  return tagger_lib.train_tagger(config, workdir), workdir


def test_tiny_training_run_learns_far_above_the_majority_tag(trained):
  metrics, _ = trained
  assert metrics["majority_baseline"] < 0.25
  assert metrics["test_accuracy"] > 0.6


def test_tagging_a_corpus_is_cached_and_aligned_with_the_lm_sentences(trained):
  _, workdir = trained
  tagger = tagger_lib.load(workdir)
  sentences = [["the", "company", "said", "N", "<unk>"], ["it", "sold", "shares"]]
  first = tagger_lib.tag_corpus(workdir, "ptb", "valid", sentences)
  path = tagger_lib.cache_path(workdir, "ptb", "valid")
  assert path.read_text().splitlines() == [" ".join(t) for t in tagger_lib.tag(tagger,
                                                                               sentences)]
  eos_tag = tagger.tags.index(vocab_lib.EOS)
  assert [len(s) for s in first] == [6, 4] and all(s[-1] == eos_tag for s in first)
  path.write_text("DT NN VBD CD NN\nPRP VBD NNS\n")      # the cache is what is read back
  again = tagger_lib.tag_corpus(workdir, "ptb", "valid", sentences)
  assert [tagger.tags[i] for i in again[1]] == ["PRP", "VBD", "NNS", vocab_lib.EOS]


def test_missing_tagger_is_a_one_line_error(tmp_path):
  with pytest.raises(tagger_lib.TaggerError, match="train one with --mode=train_tagger"):
    tagger_lib.load(tmp_path)
