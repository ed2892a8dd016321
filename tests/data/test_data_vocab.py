"""Tests for attnlm_jax.data.vocab: ids, unknown words, save/load, fingerprint."""

import numpy as np
import pytest

from attnlm_jax.data import corpus
from attnlm_jax.data import vocab as vocab_lib
from attnlm_jax.data.vocab import EOS_ID, PAD_ID, UNK_ID, Vocabulary, VocabularyError


def test_specials_and_frequency_order():
  v = Vocabulary.build([("b", "a", "c"), ("a", "b", "a"), ("<unk>", "d")])
  # a: 3, b: 2, then c and d once each, alphabetical.
  assert v.words == ["<pad>", "<eos>", "<unk>", "a", "b", "c", "d"]
  assert (PAD_ID, EOS_ID, UNK_ID) == (0, 1, 2)
  assert len(v) == 7
  # min_count 2 keeps a and b; c and d, seen once, read as <unk>.
  rare = Vocabulary.build([("b", "a", "c"), ("a", "b", "a"), ("<unk>", "d")], min_count=2)
  assert rare.words == ["<pad>", "<eos>", "<unk>", "a", "b"]


def test_encode_maps_unknown_words_to_unk_and_counts_them():
  v = Vocabulary.build([("the", "cat"), ("the", "dog")])
  ids, oov = v.encode_and_count(["the", "cow", "<unk>", "dog", "moose", "<eos>"])
  assert ids.dtype == np.int32
  assert ids.tolist() == [3, UNK_ID, UNK_ID, v.words.index("dog"), UNK_ID, EOS_ID]
  assert oov == 2  # the literal <unk> is a known word
  np.testing.assert_array_equal(v.encode(["cow", "cat"]), [UNK_ID, v.words.index("cat")])
  assert v.decode(np.array([[3, 1]])) == ["the", "<eos>"]


def test_save_load_round_trip_and_fingerprint(tmp_path):
  v = Vocabulary.build([("x", "y", "é")])
  v.save(tmp_path / "vocab.json")
  loaded = Vocabulary.load(str(tmp_path / "vocab.json"))
  assert loaded == v
  assert loaded.fingerprint() == v.fingerprint()
  assert Vocabulary.build([("x", "z")]).fingerprint() != v.fingerprint()


def test_bad_vocabulary_files(tmp_path):
  with pytest.raises(VocabularyError, match="not found"):
    Vocabulary.load(tmp_path / "missing.json")
  (tmp_path / "bad.json").write_text("{not json")
  with pytest.raises(VocabularyError, match=r"bad\.json is not one JSON value"):
    Vocabulary.load(tmp_path / "bad.json")
  (tmp_path / "bad.json").write_text('{"word": ["<pad>"]}')
  with pytest.raises(VocabularyError, match=r"bad\.json is not a saved vocabulary \(KeyError"):
    Vocabulary.load(tmp_path / "bad.json")
  with pytest.raises(VocabularyError, match="expected"):
    Vocabulary(["a", "<pad>", "<eos>", "<unk>"])
  with pytest.raises(VocabularyError, match="twice"):
    Vocabulary(list(vocab_lib.SPECIALS) + ["a", "a"])


@pytest.mark.parametrize("corpus_name, subdir, size", [
    ("ptb", "ptb", 9_999 + 2),            # README: 9,999 types incl. <unk>; + <pad>, <eos>
    ("wikitext2", "wikitext-2", 33_277 + 2),
])
def test_real_vocabulary_sizes(shared_data, corpus_name, subdir, size):
  train = corpus.read_split(corpus_name, shared_data / subdir, "train")
  assert len(Vocabulary.build(train.sentences)) == size
