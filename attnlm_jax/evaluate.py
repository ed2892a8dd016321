"""Using a trained model: perplexity of a split, per-token scores of a file, and sampling.

All three restore the best checkpoint of a training workdir (the parameters training ends
with), with the vocabulary and, unless another is given, the config saved beside it.
- `evaluate`: both perplexities of a split (`losses.py`) with the pmapped `train.eval_step`;
- `score`: the natural-log probability of every token of every line of a text file
  (`models.apply`), in the same batches as evaluation;
- `generate`: samples continuations of a prompt one token at a time (`models.step`).
"""

import dataclasses
import functools
from typing import Iterator, Optional, Sequence

from etils import epath
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from attnlm_jax import checkpoints
from attnlm_jax import data as data_lib
from attnlm_jax import losses
from attnlm_jax import models
from attnlm_jax import train
from attnlm_jax.data import batching


@dataclasses.dataclass(frozen=True)
class TrainedModel:
  """A restored model: config (vocab_size filled), vocabulary, parameters and their step."""
  config: ml_collections.ConfigDict
  vocab: data_lib.Vocabulary
  params: dict
  step: int


def load(workdir, config: Optional[ml_collections.ConfigDict] = None) -> TrainedModel:
  """Restores the best checkpoint of `workdir` (the latest if no epoch has ended yet).

  Args:
    workdir: a training run's directory.
    config: the config to use; None reads the run's config.json. Either way the checkpoint
      must fit it (vocabulary and parameter shapes), else CheckpointError.
  """
  workdir = epath.Path(workdir)
  config = (checkpoints.read_config(workdir) if config is None
            else config.copy_and_resolve_references())
  vocab = checkpoints.read_vocab(workdir)
  config.model.vocab_size = len(vocab)
  models.validate(config.model)
  params = jax.eval_shape(functools.partial(models.init, config=config.model),
                          jax.random.PRNGKey(0))
  checkpoints.check_compatible(workdir, vocab, params)
  ckpt = checkpoints.Checkpoints(workdir, read_only=True)
  step = ckpt.best_step()
  step = ckpt.latest_step() if step is None else step
  if step is None:
    raise checkpoints.CheckpointError(
        f"no checkpoint in {ckpt.directory}: train first with --mode=train "
        f"--workdir={workdir}")
  state, _ = ckpt.restore(step, jax.eval_shape(
      functools.partial(train.initial_state, config), params))
  ckpt.close()
  return TrainedModel(config, vocab, state["params"], step)


def evaluate(model: TrainedModel, split: str) -> dict:
  """Perplexities of a split of the model's corpus.

  Returns:
    {"split", "perplexity", "perplexity_paper_convention", "nll", "tokens", "sentences",
     "step"}.
  """
  data = data_lib.load(model.config.data, model.vocab)
  result = train.evaluate_batches(
      train.pmapped_eval_step(model.config.model), train.replicate(model.params),
      data.eval_batches(split, model.config.data.eval_batch_size))
  return {"split": split, **result, "step": model.step}


def _log_prob_step(params, batch, *, model_config):
  """Per-token log-probs [rows, T] (0 at padding) of one device's slice (under pmap)."""
  logits = models.apply(params, model_config, batch["inputs"], batch["lengths"])
  log_probs = losses.token_log_probs(logits, batch["targets"])
  return jnp.where(losses.token_mask(batch["lengths"], log_probs.shape[1]), log_probs, 0.0)


def score(model: TrainedModel, lines: Sequence[str]) -> Iterator[dict]:
  """Scores every non-blank line of text as one sentence (words split at whitespace).

  Yields, in input order, one {"tokens": words then "<eos>" (unknown words as "<unk>"),
  "log_probs": natural-log probability of each token, "log_prob": their sum} per sentence.
  """
  sentences = [model.vocab.encode(line.split()) for line in lines if line.strip()]
  batch_size = model.config.data.eval_batch_size
  p_step = jax.pmap(functools.partial(_log_prob_step, model_config=model.config.model),
                    axis_name=train.AXIS)
  p_params = train.replicate(model.params)
  for first in range(0, len(sentences), batch_size):
    chunk = sentences[first:first + batch_size]
    lengths = np.zeros(batch_size, np.int64)
    lengths[:len(chunk)] = [len(s) + 1 for s in chunk]
    tokens = np.concatenate([np.append(s, data_lib.EOS_ID) for s in chunk]).astype(np.int32)
    starts = np.concatenate([[0], np.cumsum(lengths[:len(chunk)])[:-1],
                             np.zeros(batch_size - len(chunk), np.int64)])
    batch = batching.make_batch(tokens, starts, lengths, int(lengths.max()))
    log_probs = np.asarray(p_step(p_params, train.shard_batch(batch, train.EVAL_TIME_MULTIPLE)))
    log_probs = log_probs.reshape(batch_size, -1)
    for row, sentence in enumerate(chunk):
      values = log_probs[row, :len(sentence) + 1].astype(float).tolist()
      yield {"tokens": model.vocab.decode(np.append(sentence, data_lib.EOS_ID)),
             "log_probs": values, "log_prob": sum(values)}


def generate(model: TrainedModel, prompt: str, num_tokens: int, temperature: float,
             seed: int) -> list[str]:
  """Samples `num_tokens` words after `prompt`, one `models.step` at a time.

  Each sentence starts from a fresh state fed the start symbol `<eos>`; the prompt's words
  are fed next; a sampled `<eos>` ends the sentence and starts a new one. Sampling is from
  softmax(logits / temperature) (greedy at temperature 0), never `<pad>`; the draw of the
  i-th word uses `fold_in(PRNGKey(seed), i)`, so a seed fixes the output.

  Returns:
    The sampled words (`<eos>` included where sentences end).
  """
  config = model.config.model
  capacity = len(prompt.split()) + num_tokens + 1
  step_fn = jax.jit(lambda params, state, token: models.step(params, config, state, token))

  def start(words: Sequence[str]):
    state = models.init_state(model.params, config, 1, capacity)
    for token in [data_lib.EOS_ID, *model.vocab.encode(words)]:
      logits, state = step_fn(model.params, state, jnp.asarray([token], jnp.int32))
    return logits, state

  @jax.jit
  def sample(logits, key):
    logits = logits[0].at[data_lib.PAD_ID].set(-jnp.inf)
    if temperature == 0:
      return jnp.argmax(logits)
    return jax.random.categorical(key, logits / temperature)

  rng = jax.random.PRNGKey(seed)
  logits, state = start(prompt.split())
  words = []
  for i in range(num_tokens):
    token = int(sample(logits, jax.random.fold_in(rng, i)))
    words.append(model.vocab.words[token])
    if token == data_lib.EOS_ID:
      logits, state = start([])
    else:
      logits, state = step_fn(model.params, state, jnp.asarray([token], jnp.int32))
  return words
