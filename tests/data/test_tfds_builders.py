"""The TFDS path (array_record, read without TensorFlow) against the direct corpus reader."""

import importlib.util
import sys

import pytest
import tensorflow_datasets as tfds

from attnlm_jax.data import corpus
from attnlm_jax.data import tfds_builders

PTB_LINES = {
    "train": " the cat sat on the mat \n a dog ran\r\n\n the <unk> sat N times \n",
    "valid": " the dog sat \n\n a cat ran on the mat \n",
    "test": " ünïcode wörds stay intact \n the end",
}
WIKI_LINES = {
    "train": (" \n = Alpha = \n \n Alpha is a letter . It comes first ! Really \n \n"
              " = = Use = = \n \n It is used . \n \n = Beta = \n \n Beta follows ? Yes . \n"),
    "valid": " \n = Gamma = \n \n Gamma is third . \n",
    "test": " \n = Delta = \n \n Delta . \n \n = Epsilon = \n \n Epsilon \n",
}


def _write(directory, layout: str, texts: dict[str, str]):
  directory.mkdir(parents=True, exist_ok=True)
  for split, text in texts.items():
    (directory / layout.format(split=split)).write_bytes(text.encode("utf-8"))
  return directory


def _assert_same_as_reader(name, data_dir, cache_dir, splits=corpus.SPLITS):
  for split in splits:
    through_tfds = tfds_builders.load_split_text(name, data_dir, split, cache_dir)
    direct = corpus.read_split(name, data_dir, split)
    assert through_tfds.sentences == direct.sentences, split
    assert through_tfds.documents == direct.documents, split
    assert through_tfds.lines == direct.lines, split


def test_tensorflow_is_not_installed():
  assert importlib.util.find_spec("tensorflow") is None


@pytest.mark.parametrize("name, layout, texts", [
    ("ptb", "ptb.{split}.txt", PTB_LINES),
    ("wikitext2", "wiki.{split}.tokens", WIKI_LINES),
])
def test_small_corpus_through_tfds_equals_direct_reader(tmp_path, name, layout, texts):
  data_dir = _write(tmp_path / "data", layout, texts)
  _assert_same_as_reader(name, data_dir, tmp_path / "cache")
  assert "tensorflow" not in sys.modules
  written = list((tmp_path / "cache").glob(f"{name}-*/{name}/*/*.array_record*"))
  assert len(written) == len(corpus.SPLITS)


def test_embedded_corpus_through_tfds_equals_direct_reader(tmp_path):
  _assert_same_as_reader("embedded", "", tmp_path / "cache", splits=("valid",))


def test_prepared_dataset_is_reused_until_the_files_change(tmp_path, monkeypatch):
  data_dir = _write(tmp_path / "data", "ptb.{split}.txt", PTB_LINES)
  cache = tmp_path / "cache"
  first = tfds_builders.load_split_text("ptb", data_dir, "valid", cache)

  def fail(*args, **kwargs):
    raise AssertionError(f"corpus re-read: {args} {kwargs}")

  monkeypatch.setattr(corpus, "read_split", fail)
  assert tfds_builders.load_split_text("ptb", data_dir, "valid", cache) == first
  monkeypatch.undo()
  (data_dir / "ptb.valid.txt").write_text(" a changed line \n")
  changed = tfds_builders.load_split_text("ptb", data_dir, "valid", cache)
  assert changed.sentences == [("a", "changed", "line")]


def test_mock_data_text_is_decoded_like_real_bytes(tmp_path):
  data_dir = _write(tmp_path / "data", "ptb.{split}.txt", PTB_LINES)
  real = tfds_builders.prepare("ptb", data_dir, tmp_path / "cache").as_data_source("train")
  assert isinstance(real[0]["text"], bytes)
  assert tfds_builders.decode_example(real[0]) == (("the", "cat", "sat", "on", "the", "mat"), 0)
  with tfds.testing.mock_data(num_examples=2):
    mock = tfds_builders.prepare("ptb", data_dir, tmp_path / "mock").as_data_source("train")
    assert isinstance(mock[0]["text"], str)
    words, document = tfds_builders.decode_example(mock[0])
    assert words == tuple(mock[0]["text"].split()) and isinstance(document, int)


@pytest.mark.parametrize("name, data_dir, split, message", [
    ("ptb", "{tmp}/missing", "valid", "does not exist"),
    ("ptb", "", "valid", "no data_dir given"),
    ("ptb", "{tmp}/wiki", "valid", "holds the wikitext2 layout"),
    ("ptb", "{tmp}/empty", "valid", "is empty"),
    ("penn", "{tmp}/ptb", "valid", "corpus 'penn' is unknown"),
    ("ptb", "{tmp}/ptb", "dev", "split 'dev' is unknown"),
])
def test_bad_input_gives_one_line_corpus_error(tmp_path, name, data_dir, split, message):
  _write(tmp_path / "ptb", "ptb.{split}.txt", PTB_LINES)
  _write(tmp_path / "wiki", "wiki.{split}.tokens", WIKI_LINES)
  _write(tmp_path / "empty", "ptb.{split}.txt", {**PTB_LINES, "test": " \n"})
  with pytest.raises(corpus.CorpusError, match=message) as e:
    tfds_builders.load_split_text(name, data_dir.format(tmp=tmp_path), split, tmp_path / "c")
  assert "\n" not in str(e.value)
  assert not list((tmp_path / "c").glob("*/*/*/*.array_record*"))


def test_real_ptb_through_tfds_equals_direct_reader(shared_data, tmp_path):
  _assert_same_as_reader("ptb", shared_data / "ptb", tmp_path / "cache")


def test_real_wikitext2_through_tfds_equals_direct_reader(shared_data, tmp_path):
  _assert_same_as_reader("wikitext2", shared_data / "wikitext-2", tmp_path / "cache",
                         splits=("valid",))
