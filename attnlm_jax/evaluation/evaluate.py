"""Using a trained model: perplexity of a split, per-token scores of a file, and sampling.

`evaluate`, `score` and `generate` restore the best checkpoint of a training workdir with its
vocabulary and config (docs/training.md, "Evaluating", "Scoring" and "Sampling");
`split_log_probs` gives the log-probability of every token of a split (what `ensemble.py` mixes).
"""

import dataclasses
import functools
from typing import Iterator, Optional, Sequence

from absl import logging
from etils import epath
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from attnlm_jax import data as data_lib
from attnlm_jax.data import batching
from attnlm_jax.data import locations
from attnlm_jax.data import pipeline
from attnlm_jax import models
from attnlm_jax.common import errors
from attnlm_jax.common import logging_utils
from attnlm_jax.models import losses
from attnlm_jax.tagger import model as tagger_model
from attnlm_jax.tagger import tagging
from attnlm_jax.training import checkpoints
from attnlm_jax.training import parallel
from attnlm_jax.training import run_config
from attnlm_jax.training import steps

# The split the interpolation weights and the test-time methods' hyperparameters are chosen on
# (`ensemble`, `cache`, `dynamic_eval`).
FIT_SPLIT = "valid"


@dataclasses.dataclass(frozen=True)
class TrainedModel:
  """A restored model: config (vocab_size filled), vocabulary, parameters and their step."""
  config: ml_collections.ConfigDict
  vocab: data_lib.Vocabulary
  params: dict
  step: int

  @functools.cached_property
  def data(self) -> data_lib.LMData:
    """The model's corpus in its vocabulary (with its tagger's tags for POS-tag inputs),
    loaded on first use and shared by every evaluation of this model."""
    return data_lib.load(self.config.data, self.vocab, tagging.corpus_tags(self.config))

  def released_count(self, split: str) -> int:
    """What the released code divides `split`'s perplexity by (`LMData.released_count`)."""
    return self.data.released_count(split)

  def check_every_token(self, method: str) -> None:
    """UserError unless the model predicts every token from a start symbol, as `method`
    (scoring, the cache, dynamic evaluation) needs: one trained without
    (`data.start_symbol=False`, the released code's rows) never predicts a first word."""
    if not self.config.data.get("start_symbol", True):
      raise errors.UserError(f"{method} needs every token predicted, and this model was "
                             "trained with config.data.start_symbol=False (a sentence's first "
                             "word is never predicted): evaluate it with --mode=evaluate alone")


def load(workdir, config: Optional[ml_collections.ConfigDict] = None) -> TrainedModel:
  """Restores the best checkpoint of `workdir` (the latest if no epoch has ended yet).

  Args:
    workdir: a training run's directory.
    config: the config to use; None reads the run's config.json. Either way the checkpoint
      must fit it (vocabulary and parameter shapes), and a given config must ask for the
      network the run trained (`checkpoints.check_evaluation_config`), else CheckpointError.
  """
  workdir = epath.Path(workdir)
  if ((workdir / logging_utils.METRICS_FILE).exists()
      and not (workdir / checkpoints.VOCAB_FILE).exists()):  # Training writes it first.
    raise checkpoints.CheckpointError(
        f"{workdir} holds a run's log but not its weights ({checkpoints.VOCAB_FILE} and a "
        f"checkpoint in {checkpoints.CHECKPOINT_DIR}/; a log copied from docs/results keeps "
        "none): train the run again in an empty --workdir")
  vocab = checkpoints.read_vocab(workdir)
  if config is not None:
    checkpoints.check_evaluation_config(workdir, config)
  config = run_config.complete(config if config is not None else _saved_config(workdir),
                               len(vocab))
  run_config.check_evaluation(config)
  params = jax.eval_shape(functools.partial(models.init, config=config.model),
                          jax.random.PRNGKey(0))
  checkpoints.check_compatible(workdir, vocab, params)
  if config.model.pos_tags:
    checkpoints.check_tagger(workdir, config.data)
  step = checkpoints.evaluated_step(workdir)
  if step is None:
    raise checkpoints.CheckpointError(
        f"no checkpoint in {workdir / checkpoints.CHECKPOINT_DIR}: train first with "
        f"--mode=train --workdir={workdir}")
  ckpt = checkpoints.Checkpoints(workdir, read_only=True)
  state, _ = ckpt.restore_evaluated(step, jax.eval_shape(
      functools.partial(steps.initial_state, config), params))
  ckpt.close()
  return TrainedModel(config, vocab, state["params"], step)


def _saved_config(workdir: epath.Path) -> ml_collections.ConfigDict:
  """The run's config.json, where directories that are none here (the run was trained on
  another machine) are found again, each said in one log line: a `data.data_dir` becomes this
  machine's directory of the same corpus (`locations.corpus_dir`), and a POS-input model's
  `data.tagger_dir` the directory of that name beside the workdir (where a table's rows keep
  their tagger; `check_tagger` then checks it is the tagger the model trained with)."""
  config = checkpoints.read_config(workdir)
  source = workdir / checkpoints.CONFIG_FILE
  data_dir = config.data.data_dir
  if config.data.corpus in locations.CORPORA and not epath.Path(data_dir).is_dir():
    config.data.data_dir = str(locations.corpus_dir(config.data.corpus))
    logging.warning("%s's data_dir %s is not a directory here: reading the corpus from %s",
                    source, data_dir, config.data.data_dir)
  tagger_dir = config.data.get("tagger_dir")
  if config.model.get("pos_tags") and tagger_dir and not epath.Path(tagger_dir).is_dir():
    beside = workdir.parent / epath.Path(tagger_dir).name
    if not beside.is_dir():
      raise checkpoints.CheckpointError(
          f"{source}'s tagger_dir {tagger_dir} is not a directory here, nor is {beside}: "
          f"copy the tagger the model trained with to {beside}")
    config.data.tagger_dir = str(beside)
    logging.warning("%s's tagger_dir %s is not a directory here: reading the tagger from %s",
                    source, tagger_dir, beside)
  return config


def evaluate(model: TrainedModel, split: str) -> dict:
  """Perplexities of a split of the model's corpus.

  Returns:
    {"split", "perplexity", "perplexity_paper_convention", "nll", "tokens", "sentences",
     "step"}.
  """
  data = model.data
  result = steps.Evaluator(model.config.model)(parallel.replicate(model.params), data, split,
                                               model.config.data.eval_batch_size)
  return {"split": split, **result, "step": model.step}


def log_prob_step(params, batch, carry, *, model_config, hidden: Optional[str] = None):
  """log p of each target [rows, T] (0 at padding), the hidden states `hidden` names
  [rows, T, H] (`models.HIDDEN_STATES`; None: none) and the rows' state after the batch
  (`carry`: a stream window's carried state; None: every row from the zero state, and None
  after)."""
  kwargs = {"tags": batch.get("tags")}
  if hidden is not None:
    kwargs.update(return_hidden=True, hidden=hidden)
  if carry is None:
    outputs = models.apply(params, model_config, batch["inputs"], batch["lengths"], **kwargs)
  else:
    outputs, carry, _ = models.apply_window(params, model_config, batch["inputs"],
                                            batch["lengths"], carry, **kwargs)
  logits, states = outputs if hidden is not None else (outputs, None)
  log_probs = losses.token_log_probs(logits, batch["targets"])
  mask = losses.token_mask(batch["lengths"], log_probs.shape[1])
  return jnp.where(mask, log_probs, 0.0), states, carry


def _unit_batches(stream: pipeline.EncodedSplit, units: tuple[np.ndarray, np.ndarray],
                  batch_size: int) -> Iterator[tuple[np.ndarray, np.ndarray, dict]]:
  """(each row's offset in the stream, its tokens, the sharded batch) of evaluation's batches
  over `units`: each unit one whole row, longest first (filler rows, last, are not placed)."""
  starts, lengths = units
  for rows, batch in pipeline.eval_batches(stream, units, batch_size):
    placed = rows[rows >= 0]
    yield (starts[placed], lengths[placed],
           parallel.shard_batch(batch, steps.EVAL_TIME_MULTIPLE))


def _window_batches(data: pipeline.LMData, split: str, batch_size: int,
                    width: int) -> Iterator[tuple[np.ndarray, np.ndarray, dict]]:
  """The same for the stream protocol's windows of `split`, read as `batch_size` streams."""
  starts, lengths = data.stream_rows(split, batch_size)
  for window, batch in enumerate(data.eval_batches(split, batch_size)):
    offset = window * width
    yield starts + offset, np.clip(lengths - offset, 0, width), parallel.shard_batch(batch)


def _outputs(model: TrainedModel, num_tokens: int, batches, carry,
             hidden: Optional[str]) -> tuple[np.ndarray, Optional[np.ndarray]]:
  """log p [num_tokens] (float64) and, with `hidden`, the hidden states [num_tokens, H]
  (float32) of the tokens that `batches` (`_unit_batches`, `_window_batches`) place, each
  batch scored by the pmapped `log_prob_step` from the `carry` the one before left."""
  batch_size = model.config.data.eval_batch_size
  p_step = jax.pmap(functools.partial(log_prob_step, model_config=model.config.model,
                                      hidden=hidden), axis_name=parallel.AXIS)
  p_params = parallel.replicate(model.params)
  log_probs = np.zeros(num_tokens, np.float64)
  states = (None if hidden is None
            else np.zeros((num_tokens, model.config.model.hidden_size), np.float32))
  for starts, counts, batch in batches:
    batch_log_probs, batch_states, carry = p_step(p_params, batch, carry)
    batch_log_probs = np.asarray(batch_log_probs).reshape(batch_size, -1)
    if states is not None:
      batch_states = np.asarray(batch_states).reshape(*batch_log_probs.shape, -1)
    for row, (start, count) in enumerate(zip(starts, counts)):
      log_probs[start:start + count] = batch_log_probs[row, :count]
      if states is not None:
        states[start:start + count] = batch_states[row, :count]
  return log_probs, states


def stream_log_probs(model: TrainedModel, stream: pipeline.EncodedSplit) -> np.ndarray:
  """log p(token) [N] (natural log, float64) of every token of an encoded token stream.

  Each sentence is one row, scored whole with `models.apply` (with the stream's tags for a
  POS-tag model) in the batches of evaluation (longest first, `eval_batch_size` rows,
  pmapped); the result is in stream order.
  """
  units = batching.sentence_units(stream.sentence_lengths)
  batches = _unit_batches(stream, units, model.config.data.eval_batch_size)
  return _outputs(model, len(stream.tokens), batches, None, None)[0]


def split_outputs(model: TrainedModel, split: str, hidden: Optional[str] = None
                  ) -> tuple[np.ndarray, np.ndarray, Optional[np.ndarray]]:
  """(tokens [N], log-probs [N], the hidden states `hidden` names [N, H] or None) of a split
  of the model's corpus, in stream order.

  The tokens are the split's stream (each sentence's word ids, then EOS_ID); the rest is
  computed over the rows of evaluation (config.data.span: whole sentences or documents, or
  under the stream protocol `eval_batch_size` streams read in windows with the state
  carried), so the log-probs sum to minus the `nll` of `evaluate`.
  """
  data = model.data
  stream = data.split(split)
  batch_size = model.config.data.eval_batch_size
  if data.is_stream:
    carry = parallel.replicate(steps.initial_carry(
        model.params, model.config.model, batch_size // jax.local_device_count()))
    batches = _window_batches(data, split, batch_size, model.config.data.max_len)
  else:
    carry, batches = None, _unit_batches(stream, data.units(split), batch_size)
  log_probs, states = _outputs(model, len(stream.tokens), batches, carry, hidden)
  return stream.tokens, log_probs, states


def split_log_probs(model: TrainedModel, split: str) -> tuple[np.ndarray, np.ndarray]:
  """(tokens [N], log-probs [N]) of a split of the model's corpus (`split_outputs`)."""
  model.check_every_token("a log-probability of every token")
  tokens, log_probs, _ = split_outputs(model, split)
  return tokens, log_probs


def _tagged(model: TrainedModel, text: data_lib.SplitText,
            stream: pipeline.EncodedSplit) -> pipeline.EncodedSplit:
  """`stream` with the tags of `text` by the model's tagger (unchanged without pos_tags)."""
  if not model.config.model.pos_tags:
    return stream
  tags = tagger_model.tag_ids(tagging.load(model.config.data.tagger_dir), text.sentences)
  return dataclasses.replace(stream, tags=np.concatenate(
      [np.append(ids, data_lib.EOS_ID) for ids in tags]).astype(np.int32))


def score(model: TrainedModel, lines: Sequence[str], *,
          keep_blank: bool = False) -> Iterator[dict]:
  """Scores every non-blank line of text as one sentence (words split at whitespace).

  keep_blank: score blank lines too, each as a sentence without words (only its `<eos>`):
    an n-best list's empty hypothesis (`rescoring`).
  With POS-tag inputs, the lines are tagged by the model's left-to-right tagger first.

  Yields, in input order, one {"tokens": words then "<eos>" (unknown words as "<unk>"),
  "log_probs": natural-log probability of each token, "log_prob": their sum} per sentence.
  """
  model.check_every_token("scoring")
  sentences = [tuple(line.split()) for line in lines if keep_blank or line.strip()]
  text = data_lib.SplitText(sentences, [0] * len(sentences))
  stream = _tagged(model, text, pipeline.encode_split(text, model.vocab))
  log_probs = stream_log_probs(model, stream)
  ends = np.cumsum(stream.sentence_lengths)
  for first, last in zip(ends - stream.sentence_lengths, ends):
    values = log_probs[first:last].tolist()
    yield {"tokens": model.vocab.decode(stream.tokens[first:last]),
           "log_probs": values, "log_prob": sum(values)}


def generate(model: TrainedModel, prompt: str, num_tokens: int, temperature: float,
             seed: int) -> list[str]:
  """Samples `num_tokens` words after `prompt`, one `models.step` at a time.

  Each sentence starts from a fresh state fed `<eos>`, then the prompt's words; a sampled
  `<eos>` starts a new sentence. Sampling is from softmax(logits / temperature) (greedy at
  temperature 0), never `<pad>`; a seed fixes the output. With POS-tag inputs each word is fed
  with its tag from the left-to-right tagger.

  Returns:
    The sampled words (`<eos>` included where sentences end).
  """
  model.check_every_token("sampling")
  if not 0 <= temperature < float("inf"):
    raise errors.UserError(f"temperature {temperature} is not a number from 0 (greedy) up: "
                           "pass --temperature=1.0 to sample from the model as trained")
  config = model.config.model
  capacity = len(prompt.split()) + num_tokens + 1
  step_fn = jax.jit(lambda params, state, token, tag: models.step(params, config, state,
                                                                  token, tag=tag))
  pos_tagger = tagging.load(model.config.data.tagger_dir) if config.pos_tags else None

  def feed(state, sentence: list[str]):
    """Feeds the last word of `sentence` ([]: the start symbol) with its tag."""
    token = model.vocab.encode(sentence[-1:])[0] if sentence else data_lib.EOS_ID
    tag = (tagger_model.tag_ids(pos_tagger, [sentence])[0][-1] if pos_tagger and sentence
           else data_lib.EOS_ID)
    return step_fn(model.params, state, jnp.asarray([token], jnp.int32),
                   jnp.asarray([tag], jnp.int32))

  def start(words: Sequence[str]):
    state = models.init_state(model.params, config, 1, capacity)
    for end in range(len(words) + 1):
      logits, state = feed(state, list(words[:end]))
    return logits, state

  @jax.jit
  def sample(logits, key):
    logits = logits[0].at[data_lib.PAD_ID].set(-jnp.inf)
    if temperature == 0:
      return jnp.argmax(logits)
    return jax.random.categorical(key, logits / temperature)

  rng = jax.random.PRNGKey(seed)
  sentence = prompt.split()
  logits, state = start(sentence)
  words = []
  for i in range(num_tokens):
    token = int(sample(logits, jax.random.fold_in(rng, i)))
    words.append(model.vocab.words[token])
    if token == data_lib.EOS_ID:
      sentence = []
      logits, state = start(sentence)
    else:
      sentence.append(model.vocab.words[token])
      logits, state = feed(state, sentence)
  return words
