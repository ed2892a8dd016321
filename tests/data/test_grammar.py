"""Tests of the embedded corpus grammar, its shipped files and its agreement probe set."""

import gzip
import json
import pathlib
import statistics
import subprocess
import sys

import pytest

from attnlm_jax.data import grammar

EMBEDDED = pathlib.Path(grammar.__file__).resolve().parent / "embedded"
FILES = ("train.txt.gz", "valid.txt.gz", "test.txt.gz", "agreement.jsonl.gz")


def _lines(path: pathlib.Path) -> list[str]:
  with gzip.open(path, "rt", encoding="utf-8") as f:
    return f.read().splitlines()


def _probes() -> list[dict]:
  return [json.loads(line) for line in _lines(EMBEDDED / "agreement.jsonl.gz")]


def test_regenerates_shipped_files_byte_for_byte(tmp_path):
  grammar.write_corpus(tmp_path)
  for name in FILES:
    shipped, fresh = (EMBEDDED / name).read_bytes(), (tmp_path / name).read_bytes()
    assert gzip.decompress(fresh) == gzip.decompress(shipped), name
    assert fresh[4:8] == b"\0\0\0\0", f"{name}: gzip mtime must be 0"
    assert fresh == shipped, f"{name}: same text, different compressed bytes"


def test_other_seed_gives_other_sentences():
  first = [s.words for s in grammar.generate_sentences(50, seed=0)]
  assert first == [s.words for s in grammar.generate_sentences(50, seed=0)]
  assert first != [s.words for s in grammar.generate_sentences(50, seed=1)]


def test_split_sizes_lengths_and_vocabulary():
  splits = {s: [line.split(" ") for line in _lines(EMBEDDED / f"{s}.txt.gz")]
            for s in ("train", "valid", "test")}
  assert {s: len(v) for s, v in splits.items()} == grammar.SPLIT_SIZES
  train_types = {w for sent in splits["train"] for w in sent}
  assert train_types <= grammar.VOCABULARY
  assert 200 <= len(train_types) <= 500
  for name, sentences in splits.items():
    lengths = [len(s) for s in sentences]
    assert 10 <= statistics.mean(lengths) <= 14, name
    assert max(lengths) <= grammar.MAX_WORDS, name
    assert all(w for s in sentences for w in s), f"{name}: empty word (double space)"
    assert {w for s in sentences for w in s} <= train_types, f"{name}: word unseen in train"
  assert sum(p.stat().st_size for p in EMBEDDED.iterdir()) < 2_000_000


def test_held_out_splits_barely_overlap_train():
  train = set(_lines(EMBEDDED / "train.txt.gz"))
  for split in ("valid", "test"):
    sentences = _lines(EMBEDDED / f"{split}.txt.gz")
    overlap = sum(s in train for s in sentences) / len(sentences)
    assert overlap < 0.02, f"{split}: {overlap:.2%} of sentences also in train"


@pytest.mark.parametrize("sentence, head, verb, expected", [
    ("the dog runs", 1, 2, (0, 0)),
    ("the dog often runs", 1, 3, (1, 0)),
    ("the keys to the cabinet are old", 1, 5, (3, 1)),
    ("the key to the cabinets of the rooms is old", 1, 8, (6, 2)),
    ("the authors near the old houses often write", 1, 7, (5, 0)),
    ("the dog that chases the cats runs", 1, 6, (4, 1)),
    ("the dog that the cats chase runs", 1, 6, (4, 1)),
    ("the boys who the girl near the men sees sleep", 1, 9, (7, 1)),
])
def test_dependency_stats_and_subject_head_by_hand(sentence, head, verb, expected):
  words = sentence.split()
  assert grammar.dependency_stats(words, head, verb) == expected
  assert grammar.subject_head(words[:verb]) == head
  assert grammar.agrees(words[:verb], words[verb])
  assert not grammar.agrees(words[:verb], grammar.other_number(words[verb]))


@pytest.mark.parametrize("prefix", [
    "these dog",                       # determiner and noun disagree
    "the dog that chase the cats",     # subject relative verb disagrees with the head
    "the dog that the cats chases",    # object relative verb disagrees with its subject
    "the keys is",                     # runs past the subject
    "dog",                             # no determiner
])
def test_subject_head_rejects_ungrammatical_prefixes(prefix):
  with pytest.raises(grammar.GrammarError, match="cannot analyse") as e:
    grammar.subject_head(prefix.split())
  assert "\n" not in str(e.value)


def test_other_number_pairs_and_rejects_past_forms():
  assert [grammar.other_number(v) for v in ("is", "were", "has", "chase", "carries")] == [
      "are", "was", "have", "chases", "carry"]
  with pytest.raises(grammar.GrammarError, match="'ran'"):
    grammar.other_number("ran")


def test_sampler_annotation_matches_the_parser():
  for sentence in grammar.generate_sentences(500, seed=7):
    prefix = sentence.words[:sentence.verb]
    assert grammar.subject_head(prefix) == sentence.head, sentence
    if grammar.verb_number(sentence.words[sentence.verb]) is not None:
      assert grammar.agrees(prefix, sentence.words[sentence.verb]), sentence


def test_probe_items_are_grammatical_and_counted_right():
  probes = _probes()
  assert len(probes) == grammar.PROBE_SIZE
  for item in probes:
    prefix = item["prefix"].split(" ")
    assert grammar.agrees(prefix, item["correct"]), item
    assert not grammar.agrees(prefix, item["wrong"]), item
    assert grammar.other_number(item["correct"]) == item["wrong"]
    head = grammar.subject_head(prefix)
    stats = grammar.dependency_stats(prefix + [item["correct"]], head, len(prefix))
    assert stats == (item["distance"], item["attractors"]), item
    assert item["construction"] in grammar.CONSTRUCTIONS
  assert {p["construction"] for p in probes} == set(grammar.CONSTRUCTIONS)
  assert set(range(11)) <= {p["distance"] for p in probes}
  assert len({p["prefix"] for p in probes}) == len(probes)
  assert sum(p["attractors"] > 0 for p in probes) >= len(probes) // 4


def test_probe_set_skips_excluded_sentences():
  size = 50
  stream = grammar.generate_sentences(40 * size, seed=5)
  assert len(grammar.build_probe_set(set(), seed=5, size=size)) == size
  assert grammar.build_probe_set({" ".join(s.words) for s in stream}, seed=5, size=size) == []


def test_command_line_reports_unwritable_directory_in_one_line(tmp_path):
  blocker = tmp_path / "file"
  blocker.write_text("x")
  result = subprocess.run(
      [sys.executable, "-m", "attnlm_jax.data.grammar", f"--out_dir={blocker}"],
      capture_output=True, text=True, check=False)
  assert result.returncode != 0
  assert result.stderr.strip().count("\n") == 0
  assert str(blocker) in result.stderr and "--out_dir" in result.stderr
