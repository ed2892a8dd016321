"""Tests for attnlm_jax.data.batching and the LMData batch iterators."""

import collections
import json

import ml_collections
import numpy as np
import pytest

from attnlm_jax import data as data_lib
from attnlm_jax.data import batching
from attnlm_jax.data.vocab import EOS_ID, PAD_ID

MAX_LEN = 12
BATCH = 8


def _config(directory, corpus="ptb", **overrides):
  config = dict(corpus=corpus, data_dir=str(directory), source="text", batch_size=BATCH,
                eval_batch_size=BATCH, max_len=MAX_LEN, bucket=False, span="sentence",
                seed=7)
  config.update(overrides)
  return ml_collections.ConfigDict(config)


@pytest.fixture(name="ptb_dir", scope="module")
def fixture_ptb_dir(tmp_path_factory):
  """A PTB-layout corpus of random sentences of 1..30 words (many longer than MAX_LEN)."""
  rng = np.random.default_rng(0)
  directory = tmp_path_factory.mktemp("ptb")
  for split, n in (("train", 203), ("valid", 37), ("test", 41)):
    lines = [" ".join(f"w{w}" for w in rng.integers(0, 40, rng.integers(1, 31)))
             for _ in range(n)]
    (directory / f"ptb.{split}.txt").write_text("".join(f" {l} \n" for l in lines))
  return directory


@pytest.fixture(name="wiki_dir", scope="module")
def fixture_wiki_dir(tmp_path_factory):
  """A WikiText-layout corpus: 4 articles of paragraphs; word `s<n>` names sentence n."""
  rng = np.random.default_rng(1)
  directory = tmp_path_factory.mktemp("wiki")
  n = 0
  lines = []
  for article in range(4):
    lines += ["", f" = Article {article} = ", ""]
    for _ in range(rng.integers(2, 5)):
      sentences = []
      for _ in range(rng.integers(1, 6)):
        words = [f"s{n}"] + [f"w{w}" for w in rng.integers(0, 30, rng.integers(0, 9))]
        sentences.append(" ".join(words) + " .")
        n += 1
      lines.append(" " + " ".join(sentences) + " ")
  for split in ("train", "valid", "test"):
    (directory / f"wiki.{split}.tokens").write_text("\n".join(lines) + "\n")
  return directory


def test_make_batch_by_hand():
  tokens = np.array([5, 6, 1, 7, 1, 8, 9, 10, 1], dtype=np.int32)  # [5 6] [7] [8 9 10]
  batch = batching.make_batch(tokens, np.array([5, 0, 0]), np.array([3, 3, 0]), width=4)
  np.testing.assert_array_equal(batch["targets"], [[8, 9, 10, 0], [5, 6, 1, 0], [0] * 4])
  np.testing.assert_array_equal(batch["inputs"], [[1, 8, 9, 0], [1, 5, 6, 0], [0] * 4])
  np.testing.assert_array_equal(batch["lengths"], [3, 3, 0])
  assert {v.dtype for v in batch.values()} == {np.dtype(np.int32)}


def test_document_units_by_hand():
  # sentence starts 0, 3, 5, 9, 14
  starts, lengths = batching.document_units(np.array([3, 2, 4, 5, 1]),
                                            np.array([0, 0, 0, 1, 1]), span=6)
  assert starts.tolist() == [0, 5, 9] and lengths.tolist() == [5, 4, 6]
  starts, lengths = batching.document_units(np.array([8, 2]), np.array([0, 0]), span=6)
  assert starts.tolist() == [0, 8] and lengths.tolist() == [8, 2]


def test_pad_fraction_by_hand():
  rows = np.array([[3, 1], [2, 0]])
  assert batching.pad_fraction(rows, width=4) == pytest.approx(1 - 6 / 16)
  assert batching.pad_fraction(rows) == pytest.approx(1 - 6 / (2 * 3 + 2 * 2))


def _rows(batch):
  """The predicted tokens of each real row, after checking inputs/targets/padding agree."""
  rows = []
  for inputs, targets, length in zip(batch["inputs"], batch["targets"], batch["lengths"]):
    assert (inputs[length:] == PAD_ID).all() and (targets[length:] == PAD_ID).all()
    if length:
      assert inputs[0] == EOS_ID
      np.testing.assert_array_equal(inputs[1:length], targets[:length - 1])
      rows.append(tuple(targets[:length].tolist()))
  return rows


@pytest.mark.parametrize("bucket", [False, True])
def test_epoch_feeds_every_sentence_once(ptb_dir, bucket):
  data = data_lib.load(_config(ptb_dir, bucket=bucket))
  batches = list(data.train_iterator(epoch=2))
  assert len(batches) == data.num_train_batches() == -(-203 // BATCH)
  for batch in batches:
    width = batch["inputs"].shape[1]
    assert batch["inputs"].shape[0] == BATCH
    assert width == (batch["lengths"].max() if bucket else MAX_LEN)
  fed = collections.Counter(row for batch in batches for row in _rows(batch))
  expected = collections.Counter(tuple(s[:MAX_LEN].tolist()) for s in data.sentences("train"))
  assert fed == expected
  assert sum(int((b["lengths"] == 0).sum()) for b in batches) == len(batches) * BATCH - 203


def test_epoch_order_depends_on_seed_and_epoch(ptb_dir):
  def first_targets(epoch, seed=7):
    data = data_lib.load(_config(ptb_dir, seed=seed))
    return next(data.train_iterator(epoch))["targets"]
  np.testing.assert_array_equal(first_targets(0), first_targets(0))
  assert not np.array_equal(first_targets(0), first_targets(1))
  assert not np.array_equal(first_targets(0), first_targets(0, seed=8))


@pytest.mark.parametrize("span", ["sentence", "document"])
def test_eval_covers_every_token_once(ptb_dir, span):
  data = data_lib.load(_config(ptb_dir, span=span))
  batches = list(data.eval_batches("test", batch_size=5))
  assert len(batches) == -(-len(data.units("test")[0]) // 5)
  for batch in batches:
    assert batch["inputs"].shape == (5, batch["lengths"].max())
  stream = [t for b in batches for row in _rows(b) for t in row]
  assert sorted(stream) == sorted(np.concatenate(data.sentences("test")).tolist())
  if span == "sentence":  # whole sentences, never truncated
    assert (collections.Counter(row for b in batches for row in _rows(b)) ==
            collections.Counter(tuple(s.tolist()) for s in data.sentences("test")))
  assert (batches[-1]["lengths"] == 0).sum() == len(batches) * 5 - len(data.units("test")[0])


def test_summed_loss_is_the_same_with_and_without_bucketing(ptb_dir):
  """A fixed table of log-probs per (input, target) stands in for a model."""
  data = data_lib.load(_config(ptb_dir))
  table = np.random.default_rng(3).normal(size=(len(data.vocab), len(data.vocab)))

  def epoch_loss(bucket):
    config = _config(ptb_dir, bucket=bucket)
    total = 0.0
    for batch in data_lib.load(config).train_iterator(epoch=0):
      mask = np.arange(batch["inputs"].shape[1]) < batch["lengths"][:, None]
      total += table[batch["inputs"], batch["targets"]][mask].sum()
    return total

  by_sentence = sum(table[np.concatenate([[EOS_ID], s[:-1]]), s][:MAX_LEN].sum()
                    for s in data.sentences("train"))
  assert epoch_loss(False) == pytest.approx(by_sentence, rel=1e-12)
  assert epoch_loss(True) == pytest.approx(by_sentence, rel=1e-12)


def test_bucketing_cuts_padding(ptb_dir):
  fractions = {}
  for bucket in (False, True):
    batches = list(data_lib.load(_config(ptb_dir, bucket=bucket)).train_iterator(0))
    real = sum(int(b["lengths"].sum()) for b in batches)
    fractions[bucket] = 1 - real / sum(b["inputs"].size for b in batches)
  assert fractions[True] < fractions[False] / 2


def test_document_span_packs_consecutive_sentences_of_one_article(wiki_dir):
  data = data_lib.load(_config(wiki_dir, corpus="wikitext2", span="document"))
  vocab = data.vocab
  article_of, order = {}, []
  for sentence, doc in zip(data.sentences("valid"), data.split("valid").documents):
    words = vocab.decode(sentence)
    if words[0].startswith("s"):
      article_of[words[0]] = doc
      order.append(words[0])
  seen, multi = [], 0
  for batch in data.eval_batches("valid", batch_size=4):
    for row in _rows(batch):
      ends = [i + 1 for i, t in enumerate(row) if t == EOS_ID]
      assert ends[-1] == len(row)  # whole sentences only
      names = [vocab.words[row[a]] for a in [0] + ends[:-1] if vocab.words[row[a]][0] == "s"]
      assert len(row) <= MAX_LEN or len(ends) == 1
      assert len({article_of[n] for n in names}) <= 1
      if names:
        first = order.index(names[0])
        assert names == order[first:first + len(names)]
      seen += names
      multi += len(ends) > 1
  assert sorted(seen) == sorted(order)
  assert multi > 0
  # Training feeds each packed unit once (cut at MAX_LEN), some of several sentences.
  tokens = data.split("train").tokens
  units = collections.Counter(tuple(tokens[start:start + min(length, MAX_LEN)].tolist())
                              for start, length in zip(*data.units("train")))
  fed = collections.Counter(row for batch in data.train_iterator(0) for row in _rows(batch))
  assert fed == units
  assert sum(row.count(EOS_ID) > 1 for row in fed) > 0


def test_grain_iterator_resumes_on_the_exact_next_batch(ptb_dir):
  config = _config(ptb_dir, bucket=True)
  iterator = data_lib.load(config).train_iterator(epoch=4)
  for _ in range(5):
    next(iterator)
  state = json.loads(json.dumps(iterator.get_state()))  # survives a JSON checkpoint
  rest = list(iterator)
  resumed = data_lib.load(config).train_iterator(epoch=4)
  resumed.set_state(state)
  rest_resumed = list(resumed)
  assert len(rest) == len(rest_resumed) == -(-203 // BATCH) - 5
  for a, b in zip(rest, rest_resumed, strict=True):
    for key in a:
      np.testing.assert_array_equal(a[key], b[key])


def test_bad_data_settings(ptb_dir):
  with pytest.raises(data_lib.CorpusError, match="config.data.span='paragraph' is unknown"):
    data_lib.load(_config(ptb_dir, span="paragraph"))
  with pytest.raises(data_lib.CorpusError, match="config.data.batch_size=0 must be"):
    data_lib.load(_config(ptb_dir, batch_size=0))
  with pytest.raises(data_lib.CorpusError, match="config.data.source='arrow' is unknown"):
    data_lib.load(_config(ptb_dir, source="arrow"))


def test_embedded_corpus_through_tfds_equals_the_text_reader(tmp_path):
  text = data_lib.load(_config("", corpus="embedded"))
  tfds = data_lib.load(_config("", corpus="embedded", source="tfds", cache_dir=str(tmp_path)))
  assert tfds.vocab == text.vocab
  for a, b in zip(text.sentences("valid"), tfds.sentences("valid"), strict=True):
    np.testing.assert_array_equal(a, b)


def test_unknown_words_are_counted(ptb_dir, tmp_path):
  for split in ("train", "valid", "test"):
    text = (ptb_dir / f"ptb.{split}.txt").read_text()
    (tmp_path / f"ptb.{split}.txt").write_text(text + " zzz w1 yyy zzz \n")
  data = data_lib.load(_config(tmp_path), vocab=data_lib.load(_config(ptb_dir)).vocab)
  assert data.split("valid").oov == 3
  assert data.sentences("valid")[-1].tolist() == [2, data.vocab.words.index("w1"), 2, 2, 1]


def test_tfds_source_gives_the_same_batches(ptb_dir, tmp_path):
  text = data_lib.load(_config(ptb_dir, bucket=True))
  tfds = data_lib.load(_config(ptb_dir, bucket=True, source="tfds", cache_dir=str(tmp_path)))
  assert tfds.vocab == text.vocab
  for a, b in zip(list(text.train_iterator(1)) + list(text.eval_batches("valid", 4)),
                  list(tfds.train_iterator(1)) + list(tfds.eval_batches("valid", 4)),
                  strict=True):
    for key in a:
      np.testing.assert_array_equal(a[key], b[key])


@pytest.mark.parametrize("span", ["sentence", "stream"])
def test_first_batches_are_the_epochs_own_first_batches(ptb_dir, span):
  data = data_lib.load(_config(ptb_dir, bucket=span == "sentence", span=span))
  view = data.first_batches(3)
  assert view.num_train_batches() == 3
  for epoch in (1, 2):
    cut, whole = list(view.train_iterator(epoch)), list(data.train_iterator(epoch))
    assert len(cut) == 3
    for a, b in zip(cut, whole):
      assert a.keys() == b.keys()
      for key in a:
        np.testing.assert_array_equal(a[key], b[key])
  assert data.num_train_batches() > 3  # The corpus itself is not cut.
  valid = lambda d: [b["inputs"] for b in d.eval_batches("valid", BATCH)]
  assert len(valid(view)) == len(valid(data))


@pytest.mark.parametrize("count", [0, 10**6])
def test_first_batches_out_of_range_is_a_one_line_error(ptb_dir, count):
  data = data_lib.load(_config(ptb_dir))
  with pytest.raises(data_lib.CorpusError, match=r"ask for 1 to \d+$"):
    data.first_batches(count)
