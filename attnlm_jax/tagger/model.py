"""A left-to-right LSTM part-of-speech tagger (Cao & Yu, sec. 3.2): the tag of word t is
predicted from words 1..t only, so no future word leaks into the LM's tag inputs:

    e_t = [E x_t; S_1 s1(x_t); ..; S_k sk(x_t)];  h_t = LSTM(e_t, h_{t-1}, c_{t-1})
    p(tag_t | x_1..x_t) = softmax(W h_t + b)

where the sk(x_t) are sub-word items of word t (`word_features`: endings, beginnings, shape),
so unseen words are tagged from their spelling (docs/data.md, "The POS tagger").
"""

import collections
import functools
from typing import Iterator, NamedTuple, Optional, Sequence

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from attnlm_jax.common import logging_utils
from attnlm_jax.data import vocab as vocab_lib
from attnlm_jax.models import lstm
from attnlm_jax.models import nn
from attnlm_jax.tagger import corpora

# Tag ids 0 and 1 are padding and the LM's start/end symbol <eos> (tag of the <eos> token).
TAG_SPECIALS = (vocab_lib.PAD, vocab_lib.EOS)
assert TAG_SPECIALS.index(vocab_lib.EOS) == vocab_lib.EOS_ID and vocab_lib.PAD_ID == 0
_BUCKET = 8            # Batches are padded to a multiple of this many steps (fewer compiles).
TAG_BATCH_SIZE = 256   # Sentences tagged per batch (`tag_ids`).


class Tagger(NamedTuple):
  """A trained tagger: parameters, its model config, word vocabulary and tag list."""
  params: dict
  config: ml_collections.ConfigDict
  words: vocab_lib.Vocabulary
  suffixes: vocab_lib.Vocabulary
  tags: tuple


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


def build_tags(sentences: Sequence[Sequence[str]]) -> tuple:
  """The tag list: the specials, then the training tags by decreasing count."""
  counts = collections.Counter(t for s in sentences for t in s)
  return TAG_SPECIALS + tuple(sorted(counts, key=lambda t: (-counts[t], t)))


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


def encode_sentences(tagger: Tagger, sentences, tag_index: Optional[dict] = None):
  """(word ids [T], suffix ids [T, S], tag ids [T] (0 without `tag_index`)) per sentence of
  (normalised words, tags)."""
  width = len(word_features("a", tagger.config))
  return [(tagger.words.encode(words),
           np.array([tagger.suffixes.encode(word_features(w, tagger.config)) for w in words],
                    np.int32).reshape(len(words), width),
           np.array([tag_index[t] for t in tags] if tag_index else [0] * len(words), np.int32))
          for words, tags in sentences]


def padded_batches(encoded, batch_size: int, rng: Optional[np.random.Generator]
                   ) -> Iterator[dict]:
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


@functools.partial(jax.jit, static_argnums=1)
def _predict(params: dict, config: ml_collections.FrozenConfigDict, words: jax.Array,
             suffix_ids: jax.Array) -> jax.Array:
  """The most likely tag id [B, T] of each word (compiled once per config and shape)."""
  return jnp.argmax(apply(params, config, words, suffix_ids), -1)


def tag_ids(tagger: Tagger, sentences: Sequence[Sequence[str]]) -> list[np.ndarray]:
  """The predicted tag ids of each sentence's words (normalised first), left to right; none
  for a sentence without words (TAG_BATCH_SIZE sentences a batch)."""
  with_words = [i for i, sentence in enumerate(sentences) if len(sentence)]
  encoded = encode_sentences(tagger, [([corpora.normalize(w) for w in sentences[i]], None)
                                      for i in with_words])
  config = ml_collections.FrozenConfigDict(tagger.config)
  result = [np.zeros(0, np.int32) for _ in sentences]
  with logging_utils.progress_bar("tagging", total=len(encoded), unit=" sentences") as bar:
    for start in range(0, len(encoded), TAG_BATCH_SIZE):
      chunk = encoded[start:start + TAG_BATCH_SIZE]
      batch = next(padded_batches(chunk, len(chunk), None))
      predicted = np.asarray(_predict(tagger.params, config, batch["words"],
                                      batch["suffixes"]))
      for r, row in enumerate(chunk):
        result[with_words[start + r]] = predicted[r, :len(row[0])].astype(np.int32)
      bar.update(len(chunk))
  return result


def tag(tagger: Tagger, sentences: Sequence[Sequence[str]]) -> list[list[str]]:
  """The predicted tags of each sentence (a list of words), as tag strings."""
  return [[tagger.tags[i] for i in ids] for ids in tag_ids(tagger, sentences)]


def accuracy(tagger: Tagger, sentences, only: Optional[str] = None) -> Optional[float]:
  """Fraction of tokens of `sentences` ((words, tags) pairs) tagged correctly; with `only`,
  of the tokens that are that word (None when there is none)."""
  return accuracy_of(tag(tagger, [words for words, _ in sentences]), sentences, only)


def accuracy_of(predicted: Sequence[Sequence[str]], sentences,
                only: Optional[str] = None) -> Optional[float]:
  """`accuracy` of tags already predicted for `sentences` (`tag`'s output)."""
  pairs = [(p, g) for pred, (words, gold) in zip(predicted, sentences)
           for p, g, w in zip(pred, gold, words) if only is None or w == only]
  if only is not None and not pairs:
    return None
  return sum(p == g for p, g in pairs) / max(len(pairs), 1)


def majority_baseline(train, test) -> float:
  """Accuracy of tagging every test token with the most frequent training tag."""
  top = collections.Counter(t for _, tags in train for t in tags).most_common(1)[0][0]
  test_tags = [t for _, tags in test for t in tags]
  return sum(t == top for t in test_tags) / max(len(test_tags), 1)
