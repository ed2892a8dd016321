"""Training the tagger: Adam on CoNLL-2000 (plus, optionally, the NLTK Penn Treebank sample),
the saved weights a moving average of the trained ones; scored on the CoNLL-2000 test split."""

import json
import time

from etils import epath
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from attnlm_jax.common import logging_utils
from attnlm_jax.data import vocab as vocab_lib
from attnlm_jax import models
from attnlm_jax.tagger import corpora
from attnlm_jax.tagger import model as model_lib
from attnlm_jax.tagger import tagging
from attnlm_jax.training import run_config


def _loss(params, config, batch, rng):
  """Mean token cross-entropy over the real (non-padding) positions."""
  logits = model_lib.apply(params, config, batch["words"], batch["suffixes"], train=True, rng=rng)
  nll = optax.softmax_cross_entropy_with_integer_labels(logits, batch["tags"])
  mask = batch["tags"] != 0
  return jnp.sum(nll * mask) / jnp.maximum(jnp.sum(mask), 1)


def _check_config(config: ml_collections.ConfigDict) -> None:
  """Raises a UserError for settings that cannot train (one line each), before anything is
  read or written."""
  run_config.check_seeds(config)
  run_config.check_counts(config, ("train.num_epochs", "data.batch_size"), corpora.TaggerError)
  if config.data.max_train_sentences < 0:
    raise corpora.TaggerError(f"config.data.max_train_sentences = "
                              f"{config.data.max_train_sentences} must be at least 0 (0: all)")
  run_config.check_positive(config, {"train.learning_rate": "",
                                     "train.grad_clip": "the largest global norm of a step's "
                                                        "gradient"}, corpora.TaggerError)
  decay = config.train.get("ema_decay", 0.0)
  if not 0 <= decay < 1:
    raise corpora.TaggerError(f"config.train.ema_decay = {decay} must be in [0, 1): the "
                              "weight of the moving average's past (0: no average)")


def train_tagger(config: ml_collections.ConfigDict, workdir) -> dict:
  """Trains the tagger on CoNLL-2000 train, reports its accuracy on the test split, saves it.

  config: `data` (data_dir, treebank_dir ('' = none: more training sentences from Penn
  Treebank `.pos` files), lm_data_dir ('' = none: the LM corpus whose text the tagger will
  tag; training and test words outside its vocabulary read as `<unk>`, as that text shows
  them), drop_punctuation, min_count, batch_size, max_train_sentences (0 = all)), `model`
  (see configs/tagger.py), `train` (learning_rate, num_epochs, grad_clip, ema_decay: the
  saved parameters are an exponential moving average of the trained ones, 0 = off), `seed`.
  Prints one JSON line per epoch and returns {"test_accuracy", "test_accuracy_unk" (at the
  test words read as `<unk>`; None when none is), "majority_baseline", "num_params", ...}.
  """
  if (epath.Path(workdir) / tagging.META_FILE).exists():
    raise corpora.TaggerError(f"{workdir} already holds a trained tagger, which the models "
                              "trained on its tags need: pass a new --workdir (or remove "
                              f"{workdir} to train it again)")
  _check_config(config)
  train = corpora.training_sentences(config.data)
  test = corpora.read_conll(epath.Path(config.data.data_dir) / "test.txt",
                            config.data.drop_punctuation)
  for split, sentences in (("train", train), ("test", test)):
    if not sentences:
      raise corpora.TaggerError(f"no tagged {split} sentences in {config.data.data_dir}: "
                                "pass the CoNLL-2000 files (train.txt, test.txt) there")
  if config.data.get("lm_data_dir"):
    known = corpora.lm_words(config.data.lm_data_dir)
    train, test = corpora.as_lm_text(train, known), corpora.as_lm_text(test, known)
  words = vocab_lib.Vocabulary.build([w for w, _ in train], config.data.min_count)
  endings = vocab_lib.Vocabulary.build([model_lib.word_features(w, config.model)
                                        for s, _ in train for w in s], config.data.min_count)
  tags = model_lib.build_tags([t for _, t in train])
  params = model_lib.init(jax.random.key(config.seed), config.model, len(words), len(endings),
                          len(tags))
  tagger = model_lib.Tagger(params, config.model, words, endings, tags)
  encoded = model_lib.encode_sentences(tagger, train, {t: i for i, t in enumerate(tags)})
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
      for batch in model_lib.padded_batches(encoded, config.data.batch_size, order_rng):
        rng, step_rng = jax.random.split(rng)
        params, opt_state, average, loss = train_step(params, opt_state, average, batch,
                                                      step_rng, np.float32(step))
        losses.append(loss)
        step += 1
        bar.update()
    print(json.dumps({"epoch": epoch, "train_loss": round(float(np.mean(losses)), 4),
                      "seconds": round(time.time() - start, 1)}), flush=True)
  tagger = tagger._replace(params=average if decay else params)
  predicted = model_lib.tag(tagger, [words for words, _ in test])
  metrics = {
      "test_accuracy": model_lib.accuracy_of(predicted, test),
      "test_accuracy_unk": model_lib.accuracy_of(predicted, test, only=vocab_lib.UNK),
      "train_accuracy": model_lib.accuracy(tagger, train),
      "majority_baseline": model_lib.majority_baseline(train, test),
      "num_params": models.count_params(params),
      "test_tokens": sum(len(w) for w, _ in test),
  }
  tagging.save(tagger, workdir, metrics)
  return metrics
