"""A left-to-right LSTM part-of-speech tagger, the tag source of the POS-input LMs.

Cao & Yu (sec. 3.2) feed the LM POS tags from a unidirectional tagger, so that no future word
leaks into a tag: the tag of word t is predicted from words 1..t only,

    e_t = [E x_t; S_1 s1(x_t); ..; S_k sk(x_t)];  h_t = LSTM(e_t, h_{t-1}, c_{t-1})
    p(tag_t | x_1..x_t) = softmax(W h_t + b)

(embeddings -> LSTM stack (`lstm.py`) -> softmax over tags), where the sn(x_t) are sub-word
items of word t (`word_features`): its last characters (`model.suffix_lengths`), first
characters (`model.prefix_lengths`) and shape (digit, hyphen, ..., length); an item seen
fewer than `min_count` times in training is <unk>. Words unseen in training are tagged from
their spelling (-ly, -ing, un-, 30-year, ...); word dropout teaches that. Nothing of words
after t enters. It is trained on CoNLL-2000 (WSJ sections 15-18, Penn Treebank tags), plus
optionally the NLTK Penn Treebank sample (WSJ section 00, `read_treebank_pos`), and scored
on the CoNLL-2000 test split (section 20); the saved weights are a moving average of the
trained ones.

Text normalisation, to match the PTB language-modelling files (Mikolov's preprocessing):
- a token made only of digits and the characters `. , : / \\ -`, with at least one digit
  (`1.8`, `1,000`, `3\\/4`, `10-15`), the token `%` and the token `N` become `N`;
  any other word is lower-cased (`30-year` and `1980s` stay words, as in the PTB files);
- with `drop_punctuation` (the default), tokens tagged `,` `.` `:` `` `` `` `''` `(` `)` are
  removed, as the PTB files have no punctuation (`$`, `#`, `&`, `'s` stay);
- training words seen fewer than `min_count` times become `<unk>`, which is also what the
  tagger reads for the PTB files' `<unk>`.

Trained taggers live in a workdir (`tagger.msgpack` parameters, `tagger.json` config,
vocabularies and test accuracy). `tag_corpus` tags an LM corpus once and caches the tags in
`<tagger workdir>/tags/<corpus>.<split>.txt` (beside the tagger that made them: the corpora
directory is read-only), one line per sentence, one tag per word.
"""

import collections
import functools
import json
import re
import time
from typing import Iterator, NamedTuple, Optional, Sequence

from absl import logging
from etils import epath
import flax.serialization
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from attnlm_jax import logging_utils
from attnlm_jax import lstm
from attnlm_jax import nn
from attnlm_jax.data import locations
from attnlm_jax.data import vocab as vocab_lib
from attnlm_jax.errors import UserError

# Tag ids 0 and 1 are padding and the LM's start/end symbol <eos> (tag of the <eos> token).
TAG_SPECIALS = (vocab_lib.PAD, vocab_lib.EOS)
assert TAG_SPECIALS.index(vocab_lib.EOS) == vocab_lib.EOS_ID and vocab_lib.PAD_ID == 0
PUNCTUATION_TAGS = frozenset({",", ".", ":", "``", "''", "(", ")"})
_NUMBER = re.compile(r"[\d.,:/\\-]*\d[\d.,:/\\-]*")
_BUCKET = 8            # Batches are padded to a multiple of this many steps (fewer compiles).


class TaggerError(UserError):
  """A tagger file or corpus that cannot be used; the message names the file and the fix."""


class Tagger(NamedTuple):
  """A trained tagger: parameters, its model config, word vocabulary and tag list."""
  params: dict
  config: ml_collections.ConfigDict
  words: vocab_lib.Vocabulary
  suffixes: vocab_lib.Vocabulary
  tags: tuple


# --------------------------------------------------------------------------- text


def normalize(word: str) -> str:
  """The PTB form of a word: numbers (and `%`) -> `N`, everything else lower-cased."""
  if word in ("N", "%") or _NUMBER.fullmatch(word):
    return "N"
  return word.lower()


def read_conll(path, drop_punctuation: bool = True) -> list[tuple[tuple, tuple]]:
  """Sentences of a CoNLL-2000 file (`word POS chunk` per line) as (words, tags), normalised."""
  path = epath.Path(path)
  if not path.exists():
    raise TaggerError(f"{path} not found: {locations.download_hint('conll2000', path.parent)} "
                      "or pass --config.data.data_dir=DIR, the directory holding train.txt "
                      "and test.txt")
  sentences, words, tags = [], [], []
  for line in path.read_text().splitlines() + [""]:
    fields = line.split()
    if fields:
      if not (drop_punctuation and fields[1] in PUNCTUATION_TAGS):
        words.append(normalize(fields[0]))
        tags.append(fields[1])
    elif words:
      sentences.append((tuple(words), tuple(tags)))
      words, tags = [], []
  return sentences


def read_treebank_pos(directory, drop_punctuation: bool = True) -> list[tuple[tuple, tuple]]:
  """Sentences of Penn Treebank `.pos` files (`word/TAG` tokens, `[ ]` chunk brackets) as
  (words, tags), normalised like `read_conll`.

  A sentence ends after a token tagged `.`; an ambiguous tag `A|B` reads as `A`.
  """
  files = sorted(epath.Path(directory).glob("*.pos"))
  if not files:
    raise TaggerError(f"no *.pos files in {directory}: "
                      f"{locations.download_hint('treebank_sample', directory)}, pass "
                      "--config.data.treebank_dir=DIR, a directory of Penn Treebank tagged "
                      "files, or --config.data.treebank_dir= (empty) to train on CoNLL-2000 "
                      "alone")
  sentences, words, tags = [], [], []
  for path in files:
    for item in path.read_text().split():
      word, slash, tag = item.rpartition("/")
      if not slash or not word or item.startswith("====="):
        continue
      tag = tag.split("|")[0]
      if not (drop_punctuation and tag in PUNCTUATION_TAGS):
        words.append(normalize(word.replace("\\/", "/")))
        tags.append(tag)
      if tag == "." and words:
        sentences.append((tuple(words), tuple(tags)))
        words, tags = [], []
    if words:
      sentences.append((tuple(words), tuple(tags)))
      words, tags = [], []
  return sentences


def suffixes(word: str, lengths: Sequence[int]) -> list[str]:
  """The word's endings as vocabulary items "n:ending" (`<unk>` has none: all are <unk>)."""
  if word == vocab_lib.UNK:
    return [vocab_lib.UNK] * len(lengths)
  return [f"{n}:{word[-n:]}" for n in lengths]


def shape(word: str) -> str:
  """The word's shape as one item "s:...": has a digit (d), a hyphen (h), a period (p), an
  apostrophe (a), and its length (1..5, 6+ as 6)."""
  flags = "".join(flag for flag, chars in (("d", "0123456789"), ("h", "-"), ("p", "."),
                                           ("a", "'")) if any(c in chars for c in word))
  return f"s:{flags}{min(len(word), 6)}"


def word_features(word: str, config) -> list[str]:
  """The sub-word items of a word embedded beside it: its `suffix_lengths` endings, its
  `prefix_lengths` beginnings ("pn:start") and, with `use_shape`, its `shape`
  (`<unk>` for every item of `<unk>`)."""
  prefix_lengths = tuple(config.get("prefix_lengths", ()))
  items = suffixes(word, config.suffix_lengths)
  if word == vocab_lib.UNK:
    return items + [vocab_lib.UNK] * (len(prefix_lengths) + bool(config.get("use_shape")))
  items += [f"p{n}:{word[:n]}" for n in prefix_lengths]
  return items + ([shape(word)] if config.get("use_shape") else [])


def build_vocabulary(sentences: Sequence[Sequence[str]],
                     min_count: int) -> vocab_lib.Vocabulary:
  """Items (words or suffixes) seen at least `min_count` times; the others read as <unk>."""
  counts = collections.Counter(w for s in sentences for w in s)
  kept = sorted((w for w, n in counts.items()
                 if n >= min_count and w not in vocab_lib.SPECIALS),
                key=lambda w: (-counts[w], w))
  return vocab_lib.Vocabulary(list(vocab_lib.SPECIALS) + kept)


def build_tags(sentences: Sequence[Sequence[str]]) -> tuple:
  """The tag list: the specials, then the training tags by decreasing count."""
  counts = collections.Counter(t for s in sentences for t in s)
  return TAG_SPECIALS + tuple(sorted(counts, key=lambda t: (-counts[t], t)))


# --------------------------------------------------------------------------- model


def init(rng: jax.Array, config, num_words: int, num_suffixes: int, num_tags: int) -> dict:
  """Parameters: U(-init_scale, init_scale) weights, zero biases."""
  rng_embed, rng_suffix, rng_lstm, rng_out = jax.random.split(rng, 4)
  input_size = config.embed_size + config.suffix_size * len(word_features("a", config))
  sizes = [input_size] + [config.hidden_size] * config.num_layers
  return {
      "embed": nn.uniform_init(rng_embed, (num_words, config.embed_size), config.init_scale),
      "suffix_embed": nn.uniform_init(rng_suffix, (num_suffixes, config.suffix_size),
                                      config.init_scale),
      "lstm": [lstm.init_layer(key, sizes[depth], config.hidden_size, config.init_scale, 0.0)
               for depth, key in enumerate(jax.random.split(rng_lstm, config.num_layers))],
      "out_w": nn.uniform_init(rng_out, (config.hidden_size, num_tags), config.init_scale),
      "out_b": jnp.zeros((num_tags,), jnp.float32),
  }


def apply(params: dict, config, words: jax.Array, suffix_ids: jax.Array, *,
          train: bool = False, rng: Optional[jax.Array] = None) -> jax.Array:
  """Tag logits [B, T, K] for word ids [B, T] and their suffix ids [B, T, S]: position t
  sees words 1..t only.

  Dropout (training) on the embeddings, between layers and on the last layer's output;
  word dropout (`config.word_dropout`) reads a word as <unk> (its sub-word items stay), so
  the tagger learns to tag unseen words from their spelling.
  """
  keys = iter(jax.random.split(rng, config.num_layers + 2) if train else [])
  dropout = lambda x: (x * nn.dropout_mask(next(keys), config.dropout, x.shape)
                       if train and config.dropout > 0 else x)
  if train and config.get("word_dropout", 0.0) > 0:
    unknown = jax.random.bernoulli(next(keys), config.word_dropout, words.shape)
    words = jnp.where(unknown, vocab_lib.UNK_ID, words)
  endings = params["suffix_embed"][suffix_ids].reshape(*suffix_ids.shape[:2], -1)
  inputs = jnp.concatenate([params["embed"][words], endings], axis=-1)
  inputs = jnp.swapaxes(inputs, 0, 1)                                          # [T, B, E]
  for layer in params["lstm"]:
    gates_x = lstm.input_gates(layer, dropout(inputs))
    _, inputs = lstm.scan_layer(layer, gates_x, lstm.zero_state(words.shape[0],
                                                                 config.hidden_size))
  outputs = dropout(jnp.swapaxes(inputs, 0, 1))                               # [B, T, H]
  return jnp.matmul(outputs, params["out_w"], precision=nn.PRECISION) + params["out_b"]


def _loss(params, config, batch, rng):
  """Mean token cross-entropy over the real (non-padding) positions."""
  logits = apply(params, config, batch["words"], batch["suffixes"], train=True, rng=rng)
  nll = optax.softmax_cross_entropy_with_integer_labels(logits, batch["tags"])
  mask = batch["tags"] != 0
  return jnp.sum(nll * mask) / jnp.maximum(jnp.sum(mask), 1)


# --------------------------------------------------------------------------- data


def _encode(tagger: Tagger, sentences, tag_index: Optional[dict] = None):
  """(word ids [T], suffix ids [T, S], tag ids [T] (0 without `tag_index`)) per sentence of
  (normalised words, tags)."""
  width = len(word_features("a", tagger.config))
  return [(tagger.words.encode(words),
           np.array([tagger.suffixes.encode(word_features(w, tagger.config)) for w in words],
                    np.int32).reshape(len(words), width),
           np.array([tag_index[t] for t in tags] if tag_index else [0] * len(words), np.int32))
          for words, tags in sentences]


def _batches(encoded, batch_size: int, rng: Optional[np.random.Generator]) -> Iterator[dict]:
  """Batches of sentences padded with 0 to a multiple of `_BUCKET` steps; shuffled by `rng`.

  Training batches hold sentences of similar length (sorted chunks of a shuffled order).
  """
  order = np.arange(len(encoded))
  if rng is not None:
    order = rng.permutation(order)
    chunks = [order[i:i + 50 * batch_size] for i in range(0, len(order), 50 * batch_size)]
    order = np.concatenate([c[np.argsort([len(encoded[j][0]) for j in c])] for c in chunks])
  starts = list(range(0, len(order), batch_size))
  if rng is not None:
    rng.shuffle(starts)
  for start in starts:
    rows = [encoded[j] for j in order[start:start + batch_size]]
    width = -(-max(len(w) for w, _, _ in rows) // _BUCKET) * _BUCKET
    batch = {"words": np.zeros((len(rows), width), np.int32),
             "suffixes": np.zeros((len(rows), width, rows[0][1].shape[1]), np.int32),
             "tags": np.zeros((len(rows), width), np.int32)}
    for r, row in enumerate(rows):
      for name, value in zip(("words", "suffixes", "tags"), row):
        batch[name][r, :len(value)] = value
    yield batch


def accuracy(tagger: Tagger, sentences, batch_size: int = 256) -> float:
  """Fraction of tokens of `sentences` ((words, tags) pairs) tagged correctly."""
  predicted = tag(tagger, [words for words, _ in sentences], batch_size)
  pairs = [(p, g) for pred, (_, gold) in zip(predicted, sentences) for p, g in zip(pred, gold)]
  return sum(p == g for p, g in pairs) / max(len(pairs), 1)


def majority_baseline(train, test) -> float:
  """Accuracy of tagging every test token with the most frequent training tag."""
  top = collections.Counter(t for _, tags in train for t in tags).most_common(1)[0][0]
  test_tags = [t for _, tags in test for t in tags]
  return sum(t == top for t in test_tags) / max(len(test_tags), 1)


# --------------------------------------------------------------------------- tagging


@functools.partial(jax.jit, static_argnums=1)
def _predict(params: dict, config: ml_collections.FrozenConfigDict, words: jax.Array,
             suffix_ids: jax.Array) -> jax.Array:
  """The most likely tag id [B, T] of each word (compiled once per config and shape)."""
  return jnp.argmax(apply(params, config, words, suffix_ids), -1)


def tag_ids(tagger: Tagger, sentences: Sequence[Sequence[str]],
            batch_size: int = 256) -> list[np.ndarray]:
  """The predicted tag ids of each sentence's words (normalised first), left to right; none
  for a sentence without words."""
  with_words = [i for i, sentence in enumerate(sentences) if len(sentence)]
  encoded = _encode(tagger, [([normalize(w) for w in sentences[i]], None) for i in with_words])
  config = ml_collections.FrozenConfigDict(tagger.config)
  result = [np.zeros(0, np.int32) for _ in sentences]
  with logging_utils.progress_bar("tagging", total=len(encoded), unit=" sentences") as bar:
    for start in range(0, len(encoded), batch_size):
      chunk = encoded[start:start + batch_size]
      batch = next(_batches(chunk, len(chunk), None))
      predicted = np.asarray(_predict(tagger.params, config, batch["words"],
                                      batch["suffixes"]))
      for r, row in enumerate(chunk):
        result[with_words[start + r]] = predicted[r, :len(row[0])].astype(np.int32)
      bar.update(len(chunk))
  return result


def tag(tagger: Tagger, sentences: Sequence[Sequence[str]],
        batch_size: int = 256) -> list[list[str]]:
  """The predicted tags of each sentence (a list of words), as tag strings."""
  return [[tagger.tags[i] for i in ids] for ids in tag_ids(tagger, sentences, batch_size)]


# --------------------------------------------------------------------------- files


def save(tagger: Tagger, workdir, metrics: dict) -> None:
  """Writes `tagger.msgpack` (parameters) and `tagger.json` (config, vocabularies, metrics),
  and deletes the corpus tags cached by a previous tagger in `workdir`."""
  workdir = epath.Path(workdir)
  workdir.mkdir(parents=True, exist_ok=True)
  if (workdir / "tags").exists():
    (workdir / "tags").rmtree()
  (workdir / "tagger.msgpack").write_bytes(
      flax.serialization.msgpack_serialize(jax.tree.map(np.asarray, tagger.params)))
  (workdir / "tagger.json").write_text(json.dumps(
      {"config": tagger.config.to_dict(), "words": tagger.words.words,
       "suffixes": tagger.suffixes.words, "tags": list(tagger.tags), "metrics": metrics},
      indent=1))


def _read_meta(workdir: epath.Path) -> dict:
  """The `tagger.json` of `workdir`; TaggerError when there is none."""
  if not (workdir / "tagger.json").exists():
    raise TaggerError(f"no tagger in {workdir}: train one with --mode=train_tagger "
                      f"--config=configs/tagger.py --workdir={workdir}")
  return json.loads((workdir / "tagger.json").read_text())


def set_lm_num_tags(config: ml_collections.ConfigDict) -> None:
  """With `config.model.pos_tags` on, sets `config.model.num_tags` of an LM config to the
  size of the tag list of the tagger in `config.data.tagger_dir` (TaggerError without one)."""
  if not config.model.get("pos_tags"):
    return
  if not config.data.get("tagger_dir"):
    raise TaggerError("config.model.pos_tags needs a tagger: train one with "
                      "--mode=train_tagger --config=configs/tagger.py --workdir=TAGGER_DIR "
                      "and pass --config.data.tagger_dir=TAGGER_DIR")
  config.model.num_tags = len(_read_meta(epath.Path(config.data.tagger_dir))["tags"])


def load(workdir) -> Tagger:
  """The tagger saved in `workdir` by `train_tagger`."""
  workdir = epath.Path(workdir)
  meta = _read_meta(workdir)
  params = flax.serialization.msgpack_restore((workdir / "tagger.msgpack").read_bytes())
  return Tagger(jax.tree.map(jnp.asarray, params), ml_collections.ConfigDict(meta["config"]),
                vocab_lib.Vocabulary(meta["words"]), vocab_lib.Vocabulary(meta["suffixes"]),
                tuple(meta["tags"]))


def cache_path(tagger_dir, corpus: str, split: str) -> epath.Path:
  """Where `tag_corpus` caches a split's tags: `<tagger_dir>/tags/<corpus>.<split>.txt`."""
  return epath.Path(tagger_dir) / "tags" / f"{corpus}.{split}.txt"


def tag_corpus(tagger_dir, corpus: str, split: str,
               sentences: Sequence[Sequence[str]]) -> list[np.ndarray]:
  """LM tag inputs for the sentences of one split, tagged once and cached (`cache_path`).

  Returns per sentence the tag ids of its words followed by the <eos> tag, aligned with
  `LMData.sentences(split)` (encoded words + EOS), so a batch's tag rows are built exactly as
  its token rows: `batching.make_batch(np.concatenate(tags), starts, lengths, width)["inputs"]`
  is the batch's `tags` (tag ids 0 and 1 are <pad> and <eos>, as PAD_ID and EOS_ID). The
  cache is reused while its line count matches the split.
  """
  path = cache_path(tagger_dir, corpus, split)
  tagger = load(tagger_dir)
  index = {t: i for i, t in enumerate(tagger.tags)}
  lines = path.read_text().splitlines() if path.exists() else []
  if len(lines) != len(sentences):
    logging.info("tagging the %d sentences of %s %s with the tagger in %s (once: cached in "
                 "%s)", len(sentences), corpus, split, tagger_dir, path)
    lines = [" ".join(tagger.tags[i] for i in ids) for ids in tag_ids(tagger, sentences)]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines))
  eos_tag = index[vocab_lib.EOS]
  return [np.array([index[t] for t in line.split()] + [eos_tag], np.int32) for line in lines]


# --------------------------------------------------------------------------- training


def train_tagger(config: ml_collections.ConfigDict, workdir) -> dict:
  """Trains the tagger on CoNLL-2000 train, reports its accuracy on the test split, saves it.

  config: `data` (data_dir, treebank_dir ('' = none: more training sentences from Penn
  Treebank `.pos` files), drop_punctuation, min_count, batch_size, max_train_sentences
  (0 = all)), `model` (see configs/tagger.py), `train` (learning_rate, num_epochs,
  grad_clip, ema_decay: the saved parameters are an exponential moving average of the
  trained ones, 0 = off), `seed`. Prints one JSON line per epoch and returns
  {"test_accuracy", "majority_baseline", "num_params", ...}.
  """
  data_dir = epath.Path(config.data.data_dir)
  train = read_conll(data_dir / "train.txt", config.data.drop_punctuation)
  test = read_conll(data_dir / "test.txt", config.data.drop_punctuation)
  if config.data.max_train_sentences:
    train = train[:config.data.max_train_sentences]
  if config.data.get("treebank_dir"):
    train = train + read_treebank_pos(config.data.treebank_dir, config.data.drop_punctuation)
  words = build_vocabulary([w for w, _ in train], config.data.min_count)
  endings = build_vocabulary([word_features(w, config.model)
                              for s, _ in train for w in s], config.data.min_count)
  tags = build_tags([t for _, t in train])
  params = init(jax.random.key(config.seed), config.model, len(words), len(endings), len(tags))
  tagger = Tagger(params, config.model, words, endings, tags)
  encoded = _encode(tagger, train, {t: i for i, t in enumerate(tags)})
  optimizer = optax.chain(optax.clip_by_global_norm(config.train.grad_clip),
                          optax.adam(config.train.learning_rate))
  opt_state = optimizer.init(params)
  decay = config.train.get("ema_decay", 0.0)

  @jax.jit
  def train_step(params, opt_state, average, batch, rng, step):
    loss, grads = jax.value_and_grad(_loss)(params, config.model, batch, rng)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    params = optax.apply_updates(params, updates)
    rate = jnp.minimum(decay, (1.0 + step) / (10.0 + step))   # Short memory at first.
    average = jax.tree.map(lambda a, p: rate * a + (1.0 - rate) * p, average, params)
    return params, opt_state, average, loss

  rng = jax.random.key(config.seed + 1)
  order_rng = np.random.default_rng(config.seed)
  average, step = params, 0
  for epoch in range(1, config.train.num_epochs + 1):
    start, losses = time.time(), []
    num_batches = -(-len(encoded) // config.data.batch_size)
    with logging_utils.progress_bar(f"epoch {epoch}", total=num_batches, unit="batch") as bar:
      for batch in _batches(encoded, config.data.batch_size, order_rng):
        rng, step_rng = jax.random.split(rng)
        params, opt_state, average, loss = train_step(params, opt_state, average, batch,
                                                      step_rng, np.float32(step))
        losses.append(loss)
        step += 1
        bar.update()
    print(json.dumps({"epoch": epoch, "train_loss": round(float(np.mean(losses)), 4),
                      "seconds": round(time.time() - start, 1)}), flush=True)
  tagger = tagger._replace(params=average if decay else params)
  metrics = {
      "test_accuracy": accuracy(tagger, test),
      "train_accuracy": accuracy(tagger, train),
      "majority_baseline": majority_baseline(train, test),
      "num_params": int(sum(np.prod(x.shape) for x in jax.tree.leaves(params))),
      "test_tokens": sum(len(w) for w, _ in test),
  }
  save(tagger, workdir, metrics)
  return metrics
