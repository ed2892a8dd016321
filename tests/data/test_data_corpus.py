"""Tests for attnlm_jax.data.corpus: real-data counts, WikiText splitting, bad input."""

import gzip

import pytest

from attnlm_jax.data import corpus
from attnlm_jax.data.corpus import CorpusError


def _write_ptb(directory, texts):
  """Writes ptb.{split}.txt files; `texts` maps split -> bytes or str."""
  directory.mkdir(parents=True, exist_ok=True)
  for split in corpus.SPLITS:
    data = texts.get(split, " a b \n c \n")
    (directory / f"ptb.{split}.txt").write_bytes(
        data if isinstance(data, bytes) else data.encode("utf-8"))
  return directory


def _words_and_lines(text):
  return sum(map(len, text.sentences)), text.lines


@pytest.mark.parametrize("split, lines, tokens", [
    ("train", 42_068, 929_589), ("valid", 3_370, 73_760), ("test", 3_761, 82_430)])
def test_real_ptb_counts(shared_data, split, lines, tokens):
  text = corpus.read_split("ptb", shared_data / "ptb", split)
  words, _ = _words_and_lines(text)
  assert len(text.sentences) == text.lines == lines
  assert words + len(text.sentences) == tokens
  assert text.documents == list(range(lines))


@pytest.mark.parametrize("split, lines, words, documents", [
    ("train", 36_718, 2_051_910, 600), ("valid", 3_760, 213_886, 60),
    ("test", 4_358, 241_211, 60)])
def test_real_wikitext2_counts(shared_data, split, lines, words, documents):
  text = corpus.read_split("wikitext2", shared_data / "wikitext-2", split)
  assert _words_and_lines(text) == (words, lines)  # README: line_tokens = words + lines
  # 600 / 60 / 60 articles (Merity et al. 2016), one per top-level heading.
  assert text.documents[-1] + 1 == documents
  assert text.documents == sorted(text.documents)
  assert len(text.sentences) > 2 * lines  # paragraphs were split into sentences


def test_wikitext_sentence_splitting_headings_and_documents(tmp_path):
  text = ("\n = Alpha = \n\n"
          " The cat sat . It ran ! Why ? trailing words \n"
          "\n = = Sub part = = \n\n"
          " Speed = 1 m / s = fast . \n"
          " = 1 m / s = \n"                # formula line inside text: not a heading
          "\n = Beta = \n\n"
          " Mr. X @.@ 5 said . \n")
  d = tmp_path / "wt"
  d.mkdir()
  for split in corpus.SPLITS:
    (d / f"wiki.{split}.tokens").write_text(text)
  got = corpus.read_split("wikitext2", d, "valid")
  assert got.sentences == [
      ("=", "Alpha", "="),
      ("The", "cat", "sat", "."), ("It", "ran", "!"), ("Why", "?"), ("trailing", "words"),
      ("=", "=", "Sub", "part", "=", "="),
      ("Speed", "=", "1", "m", "/", "s", "=", "fast", "."),
      ("=", "1", "m", "/", "s", "="),
      ("=", "Beta", "="),
      ("Mr.", "X", "@.@", "5", "said", "."),
  ]
  assert got.documents == [0, 0, 0, 0, 0, 0, 0, 0, 1, 1]
  assert got.lines == 13


def test_a_line_with_unequal_equals_signs_is_no_heading(tmp_path):
  """`= = Odd =` and `= = =` have no title between equal runs of `=`: no new document."""
  text = "\n = Alpha = \n\n a b . \n\n = = Odd = \n\n c d . \n\n = = = \n\n e f . \n"
  d = tmp_path / "wt"
  d.mkdir()
  for split in corpus.SPLITS:
    (d / f"wiki.{split}.tokens").write_text(text)
  got = corpus.read_split("wikitext2", d, "valid")
  assert got.sentences[2] == ("=", "=", "Odd", "=") and got.documents == [0] * 6


def test_crlf_blank_and_long_lines(tmp_path):
  long_line = " ".join(f"w{i % 997}" for i in range(200_000))
  text = f" a b \n\n   \n c d e \n{long_line}\n"
  unix = _write_ptb(tmp_path / "unix", {"train": text})
  dos = _write_ptb(tmp_path / "dos", {"train": text.replace("\n", "\r\n")})
  got = corpus.read_split("ptb", unix, "train")
  assert got == corpus.read_split("ptb", dos, "train")
  assert [len(s) for s in got.sentences] == [2, 3, 200_000]  # blank lines are dropped
  assert got.sentences[2][-1] == f"w{199_999 % 997}"
  assert got.lines == 5
  # A final line without a newline is read too.
  no_final = _write_ptb(tmp_path / "nofinal", {"train": " a b \r\n c"})
  assert corpus.read_split("ptb", no_final, "train").sentences == [("a", "b"), ("c",)]


def _one_line_error(match, *args):
  with pytest.raises(CorpusError, match=match) as info:
    corpus.read_split(*args)
  assert "\n" not in str(info.value)
  return str(info.value)


def test_missing_directory_and_file(tmp_path):
  download = (r'download Penn Treebank with "python -m attnlm_jax\.data\.download '
              r'--corpus=ptb" or pass --config\.data\.data_dir=DIR, the directory holding '
              r'ptb\.\{train,valid,test\}\.txt$')
  _one_line_error(f"nowhere does not exist: {download}", "ptb", tmp_path / "nowhere", "train")
  (tmp_path / "afile").write_text("x")
  _one_line_error("is a file, not a directory", "ptb", tmp_path / "afile", "train")
  _one_line_error("no data_dir given for corpus ptb", "ptb", "", "train")
  d = _write_ptb(tmp_path / "p", {})
  (d / "ptb.valid.txt").unlink()
  _one_line_error(rf"ptb\.valid\.txt not found: {download}", "ptb", d, "valid")


def test_empty_files(tmp_path):
  d = _write_ptb(tmp_path / "p", {"train": "", "valid": " \n\n \r\n", "test": "a"})
  _one_line_error(r"ptb\.train\.txt is empty", "ptb", d, "train")
  _one_line_error(r"ptb\.valid\.txt is empty", "ptb", d, "valid")


def test_non_utf8_bytes(tmp_path):
  d = _write_ptb(tmp_path / "p", {"test": b" ok line \n fine \n caf\xe9 \n"})
  message = _one_line_error(r"ptb\.test\.txt: byte 0xe9 at offset 21 \(line 3\) is not UTF-8",
                            "ptb", d, "test")
  assert "re-encode" in message


def test_other_corpus_layout(tmp_path):
  d = tmp_path / "wt"
  d.mkdir()
  for split in corpus.SPLITS:
    (d / f"wiki.{split}.tokens").write_text(" a . \n")
  _one_line_error(r"holds the wikitext2 layout .* use --config\.data\.corpus=wikitext2, or "
                  r"point --config\.data\.data_dir at the ptb files", "ptb", d, "train")
  p = _write_ptb(tmp_path / "p", {})
  _one_line_error(r"holds the ptb layout .* use --config\.data\.corpus=ptb", "wikitext2", p,
                  "test")
  # The parent of the corpus directory: point at the subdirectory.
  _one_line_error(r"but .*/p holds the ptb files: use --config\.data\.data_dir=.*/p$", "ptb",
                  tmp_path, "train")


def test_unknown_corpus_and_split(tmp_path):
  _one_line_error("corpus 'lm1b' is unknown: use one of ptb, wikitext2, embedded", "lm1b",
                  tmp_path, "train")
  _one_line_error("split 'dev' is unknown", "ptb", tmp_path, "dev")


def test_detect(tmp_path):
  assert corpus.detect("") == "embedded"
  assert corpus.detect(_write_ptb(tmp_path / "p", {})) == "ptb"
  with pytest.raises(CorpusError, match="use --config.data.data_dir=.*/p"):
    corpus.detect(tmp_path)
  (tmp_path / "empty").mkdir()
  with pytest.raises(CorpusError, match="empty holds neither ptb.train.txt nor wiki"):
    corpus.detect(tmp_path / "empty")
  with pytest.raises(CorpusError, match="missing does not exist"):
    corpus.detect(tmp_path / "missing")


def test_embedded_corpus_from_package_files(tmp_path, monkeypatch):
  monkeypatch.setattr(corpus, "embedded_dir", lambda: tmp_path)
  (tmp_path / "train.txt.gz").write_bytes(gzip.compress(b"the dog runs\nthe dogs run\n"))
  got = corpus.read_split("embedded", "", "train")
  assert got.sentences == [("the", "dog", "runs"), ("the", "dogs", "run")]
  assert got.documents == [0, 1]
  _one_line_error(r"valid\.txt\.gz is missing from the package: generate it with",
                  "embedded", "", "valid")
  (tmp_path / "test.txt.gz").write_bytes(b"not gzip")
  _one_line_error(r"test\.txt\.gz is not a valid gzip file", "embedded", "", "test")
