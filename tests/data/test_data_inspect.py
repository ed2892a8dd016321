"""Tests for `python -m attnlm_jax.data.inspect` and the statistics it prints."""

import gzip
import importlib.resources
import json
import subprocess
import sys

import pytest

from attnlm_jax.data import inspect as inspect_lib
import tiny_config



def _run(*flags):
  return subprocess.run([sys.executable, "-m", "attnlm_jax.data.inspect", *flags],
                        cwd=tiny_config.REPO, capture_output=True, text=True, timeout=120,
                        check=False)


def _write_tiny_ptb(directory):
  directory.mkdir()
  # train: words per sentence 1, 1, 5, 5 (tokens 2, 2, 6, 6), one blank line, CRLF ends.
  (directory / "ptb.train.txt").write_bytes(b" a \r\n b \r\n\r\n a b c d e \r\n e d c b a \r\n")
  (directory / "ptb.valid.txt").write_text(" a zz b \n")
  (directory / "ptb.test.txt").write_text(" c \n q q \n")
  return directory


def test_cli_prints_hand_computed_statistics(tmp_path):
  result = _run(f"--data_dir={_write_tiny_ptb(tmp_path / 'tiny')}", "--batch_size=2",
                "--width_multiple=1")
  assert result.returncode == 0, result.stderr
  stats = json.loads(result.stdout)
  assert stats["corpus"] == "ptb"  # detected from the layout
  assert stats["vocab_size"] == 3 + 5
  train = stats["splits"]["train"]
  assert (train["lines"], train["line_tokens"], train["words"]) == (5, 17, 12)
  assert (train["sentences"], train["tokens"], train["oov"]) == (4, 16, 0)
  # Protocol: 2 batches x 2 rows x 35 positions for 16 tokens. Bucketed: [2, 2] and [6, 6].
  assert train["pad_fraction_protocol"] == round(1 - 16 / 140, 4)
  assert train["pad_fraction_bucketed"] == 0.0
  # With widths rounded up to multiples of 4: [2, 2] in 4 positions, [6, 6] in 8.
  rounded = json.loads(_run(f"--data_dir={tmp_path / 'tiny'}", "--batch_size=2").stdout)
  assert rounded["splits"]["train"]["pad_fraction_bucketed"] == round(1 - 16 / 24, 4)
  assert train["truncated_tokens"] == 0
  valid, test = stats["splits"]["valid"], stats["splits"]["test"]
  assert (valid["tokens"], valid["oov"]) == (4, 1)
  assert (test["tokens"], test["oov"]) == (5, 2)
  # Eval batches of 2 rows, longest first: [3, 2] pads 1 of 6 positions.
  assert test["pad_fraction_eval"] == round(1 / 6, 4)


@pytest.mark.parametrize("make_input, message", [
    (lambda d: d / "missing", "does not exist"),
    (lambda d: _write_tiny_ptb(d / "x").parent, "holds ptb: use --data_dir="),
    (lambda d: d, "pass the --data_dir that holds them, or --corpus=embedded"),
])
def test_cli_bad_directory_is_one_line_and_exit_1(tmp_path, make_input, message):
  result = _run(f"--data_dir={make_input(tmp_path)}")
  assert result.returncode == 1
  assert result.stdout == ""
  assert result.stderr.count("\n") == 1 and message in result.stderr
  assert "Traceback" not in result.stderr and "--config" not in result.stderr


def test_cli_bad_bytes_in_a_later_split(tmp_path):
  directory = _write_tiny_ptb(tmp_path / "tiny")
  (directory / "ptb.test.txt").write_bytes(b" a \n b\xff \n")
  result = _run(f"--data_dir={directory}", "--corpus=ptb")
  assert result.returncode == 1
  assert result.stderr.strip().endswith(
      "ptb.test.txt: byte 0xff at offset 6 (line 2) is not UTF-8: re-encode the file as UTF-8")


def test_real_ptb_statistics(shared_data):
  stats = inspect_lib.corpus_stats("ptb", str(shared_data / "ptb"))
  assert stats["vocab_size"] == 10_001
  train = stats["splits"]["train"]
  assert (train["sentences"], train["tokens"]) == (42_068, 929_589)
  # The paper protocol pads every row to 35: counted here from the file itself (a sentence
  # predicts its words and <eos>, at most 35 tokens), in batches of 32 rows.
  lengths = [len(line.split()) + 1
             for line in (shared_data / "ptb" / "ptb.train.txt").read_text().splitlines()
             if line.split()]
  padded = -(-len(lengths) // 32) * 32 * 35
  assert train["pad_fraction_protocol"] == pytest.approx(
      1 - sum(min(n, 35) for n in lengths) / padded, abs=5e-5)
  assert train["pad_fraction_bucketed"] < train["pad_fraction_protocol"] / 5
  assert [stats["splits"][s]["tokens"] for s in ("valid", "test")] == [73_760, 82_430]


def test_real_wikitext2_statistics(shared_data):
  stats = inspect_lib.corpus_stats(None, str(shared_data / "wikitext-2"))
  assert stats["corpus"] == "wikitext2" and stats["vocab_size"] == 33_279
  splits = stats["splits"]
  assert [splits[s]["line_tokens"] for s in ("train", "valid", "test")] == [
      2_088_628, 217_646, 245_569]
  assert splits["train"]["words"] == 2_051_910
  for split in splits.values():
    assert split["tokens"] == split["words"] + split["sentences"]
    assert split["oov"] == 0


def test_embedded_corpus_statistics():
  stats = inspect_lib.corpus_stats("embedded", "")
  embedded = importlib.resources.files("attnlm_jax.data") / "embedded"
  for split, got in stats["splits"].items():
    lines = gzip.decompress((embedded / f"{split}.txt.gz").read_bytes()).decode().splitlines()
    words = sum(len(line.split()) for line in lines)
    assert (got["lines"], got["words"], got["tokens"]) == (len(lines), words,
                                                           words + len(lines))
    assert got["pad_fraction_bucketed"] < got["pad_fraction_protocol"]
  train_lines = gzip.decompress((embedded / "train.txt.gz").read_bytes()).decode().split()
  assert stats["vocab_size"] == 3 + len(set(train_lines))
