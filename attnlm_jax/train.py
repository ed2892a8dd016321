"""Training and validation of the language models: the data-parallel steps and the loop.

`train_and_evaluate(config, workdir)` trains with the papers' recipe: SGD on
(summed token NLL / batch size) with the gradient clipped at global norm `grad_clip`, the
learning rate of `schedules.learning_rate` for each epoch, validation after every epoch,
early stopping with patience and a roll-back to the best epoch's parameters.

Data parallelism: `train_step` and `eval_step` are `jax.pmap`ped over the devices (axis
"batch"); the global batch (`config.data.batch_size`) is the per-device batch times the
device count, and the gradients are averaged with `pmean`. With one process per host, a
multi-host run needs only `jax.distributed.initialize()` before `train_and_evaluate`
(`distributed.py`): each process reads its own rows of every global batch of the same
deterministic plan (`LMData.train_iterator`), all processes save and restore the
checkpoints together (Orbax), and only process 0 writes config, vocabulary, logs and metrics
(docs/multihost.md).

The loop never waits for the devices between log intervals: batches are sent to the devices
ahead of use (`prefetch`), the step counter and the running sums of the training metrics
stay on the devices (`accumulating_train_step`, donated buffers) and are read once per
`log_every_steps`.

The run is deterministic for a seed and device count, and resumes from the latest checkpoint
in `workdir` to the same result as an uninterrupted run (`checkpoints.py`).
"""

import collections
import functools
import itertools
import math
from typing import Any, Iterable, Iterator

from absl import logging
from etils import epath
import jax
from jax.experimental import multihost_utils
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from attnlm_jax import checkpoints
from attnlm_jax import data as data_lib
from attnlm_jax import logging_utils
from attnlm_jax import losses
from attnlm_jax import models
from attnlm_jax import schedules
from attnlm_jax import tagger
from attnlm_jax.errors import ConfigError

AXIS = "batch"
# Evaluation batches are padded in time to a multiple of this, to bound recompilations.
EVAL_TIME_MULTIPLE = 16
# Batches on their way to the devices while a step runs.
PREFETCH = 2


def make_optimizer(train_config: ml_collections.ConfigDict) -> optax.GradientTransformation:
  """SGD on the gradient clipped at global norm `grad_clip`; the lr is a state hyperparameter.

  The learning rate lives in `opt_state.hyperparams["learning_rate"]` (optax
  inject_hyperparams), so `train_step` sets it per epoch and checkpoints carry it.
  """
  def sgd_with_clipping(learning_rate, grad_clip):
    return optax.chain(optax.clip_by_global_norm(grad_clip), optax.sgd(learning_rate))
  return optax.inject_hyperparams(sgd_with_clipping, static_args=("grad_clip",))(
      learning_rate=train_config.learning_rate, grad_clip=train_config.grad_clip)


def train_step(params: dict, opt_state: Any, batch: dict, rng: jax.Array, step: jax.Array,
               learning_rate: jax.Array, *, model_config: ml_collections.ConfigDict,
               optimizer: optax.GradientTransformation):
  """One SGD step on one device's slice of the batch (run under pmap, axis "batch").

  The loss is the device's summed token NLL / its rows; the mean of that over devices is the
  global summed NLL / global batch size, so `pmean` of the gradients is the gradient of the
  papers' loss. Dropout uses rng folded with the step and the device index.

  Returns:
    (params, opt_state, {"nll": summed NLL, "tokens": predicted tokens} of the global batch).
  """
  rng = jax.random.fold_in(jax.random.fold_in(rng, step), jax.lax.axis_index(AXIS))
  weights = models.trainable(params)

  def loss_fn(weights):
    logits, updates = models.apply({**params, **weights}, model_config, batch["inputs"],
                                   batch["lengths"], train=True, rng=rng, mutable=True,
                                   tags=batch.get("tags"))
    return losses.loss(logits, batch["targets"], batch["lengths"]), updates

  (loss, updates), grads = jax.value_and_grad(loss_fn, has_aux=True)(weights)
  grads = jax.lax.pmean(grads, AXIS)
  opt_state.hyperparams["learning_rate"] = learning_rate
  steps, opt_state = optimizer.update(grads, opt_state, weights)
  new_params = {**params, **optax.apply_updates(weights, steps),
                **jax.lax.pmean(updates, AXIS)}
  metrics = {"nll": loss * batch["targets"].shape[0], "tokens": jnp.sum(batch["lengths"])}
  return new_params, opt_state, jax.lax.psum(metrics, AXIS)


def zero_totals() -> dict:
  """The running sums of `accumulating_train_step` at the start of a log interval."""
  return {"nll": np.float32(0), "tokens": np.int32(0)}


def accumulating_train_step(params: dict, opt_state: Any, totals: dict, batch: dict,
                            rng: jax.Array, step: jax.Array, learning_rate: jax.Array,
                            **kwargs):
  """`train_step` number `step` that adds its metrics to `totals` and counts the step.

  Pmapped with params, opt_state, totals and step donated, it keeps everything that changes
  per step on the devices: the loop sends only the batch and reads `totals` once per log
  interval.

  Returns:
    (params, opt_state, totals + this batch's {"nll", "tokens"}, step + 1).
  """
  params, opt_state, metrics = train_step(params, opt_state, batch, rng, step, learning_rate,
                                          **kwargs)
  return params, opt_state, jax.tree.map(jnp.add, totals, metrics), step + 1


def eval_step(params: dict, batch: dict, *, model_config: ml_collections.ConfigDict) -> dict:
  """Summed `losses.nll_sums` of the global batch (run under pmap, axis "batch")."""
  logits = models.apply(params, model_config, batch["inputs"], batch["lengths"],
                        tags=batch.get("tags"))
  sums = losses.nll_sums(logits, batch["inputs"], batch["targets"], batch["lengths"])
  return jax.lax.psum(sums, AXIS)


def shard_batch(batch: dict, time_multiple: int = 1) -> dict:
  """This process's rows of a global batch, reshaped to [local devices, rows, ...].

  Args:
    batch: {"inputs", "targets", "lengths", ...} numpy arrays of the rows this process
      reads (all rows with one process; see `LMData.train_iterator`).
    time_multiple: pad the time axis with PAD_ID up to a multiple of this.
  """
  devices = jax.local_device_count()
  rows = batch["lengths"].shape[0]
  steps = batch["inputs"].shape[1]
  pad = -steps % time_multiple
  sharded = {}
  for key, value in batch.items():
    if value.ndim == 2 and pad:
      value = np.pad(value, ((0, 0), (0, pad)), constant_values=data_lib.PAD_ID)
    sharded[key] = value.reshape(devices, rows // devices, *value.shape[1:])
  return sharded


def evaluate_batches(p_eval_step, params: dict, batches: Iterable[dict]) -> dict:
  """Sums of `eval_step` over `batches` and both perplexities.

  The steps are all dispatched before the first sum is read, and the sums are added on the
  host in float64.

  Args:
    p_eval_step: the pmapped `eval_step`.
    params: replicated parameters.
    batches: this process's rows of each evaluation batch (`LMData.eval_batches`).

  Returns:
    {"perplexity", "perplexity_paper_convention", "nll", "tokens", "sentences"}.
  """
  sums = [p_eval_step(params, batch)
          for batch, _ in prefetch(((b, None) for b in batches), EVAL_TIME_MULTIPLE)]
  totals = dict.fromkeys(losses.SUM_KEYS, 0.0)
  for batch_sums in sums:
    for key in totals:
      totals[key] += float(first_replica(batch_sums[key]))
  return {**losses.perplexities(totals), "nll": totals["nll"],
          "tokens": int(totals["tokens"]), "sentences": int(totals["sentences"])}


def pmapped_eval_step(model_config: ml_collections.ConfigDict):
  """`eval_step` pmapped over the local devices."""
  return jax.pmap(functools.partial(eval_step, model_config=model_config), axis_name=AXIS)


def check_config(config: ml_collections.ConfigDict) -> None:
  """Raises ConfigError for training settings that cannot work (one line each)."""
  models.validate(config.model)
  devices = jax.device_count()
  for field in ("batch_size", "eval_batch_size"):
    if config.data[field] % devices:
      raise ConfigError(f"config.data.{field} = {config.data[field]} (the global batch) does "
                        f"not split over {devices} devices: use a multiple of {devices}")
  for field in ("num_epochs", "patience", "log_every_steps"):
    if config.train[field] < 1:
      raise ConfigError(f"config.train.{field} = {config.train[field]} must be at least 1")


def prepare(config: ml_collections.ConfigDict, workdir, vocab=None):
  """Config with vocab_size (and num_tags) filled, the data, and initial parameters; checks
  the workdir.

  Args:
    config: the run's config (not modified).
    workdir: the run's directory; refused when its checkpoint does not fit the config.
    vocab: the vocabulary (None: built from the training split).

  Returns:
    (config copy with model.vocab_size (and model.num_tags with pos_tags) set, LMData,
    initial params).
  """
  config = config.copy_and_resolve_references()
  tagger.set_lm_num_tags(config)
  data = data_lib.load(config.data, vocab)
  config.model.vocab_size = len(data.vocab)
  check_config(config)
  init_rng, _ = jax.random.split(jax.random.PRNGKey(config.seed))
  params = jax.jit(functools.partial(models.init, config=config.model))(init_rng)
  checkpoints.check_compatible(epath.Path(workdir), data.vocab, params)
  return config, data, params


def initial_state(config: ml_collections.ConfigDict, params: dict) -> dict:
  """The checkpointed training state before the first step (host arrays)."""
  opt_state = make_optimizer(config.train).init(models.trainable(params))
  _, dropout_rng = jax.random.split(jax.random.PRNGKey(config.seed))
  return {"params": params, "opt_state": opt_state, "rng": dropout_rng,
          "step": np.zeros((), np.int64)}


def replicate(tree, devices=None):
  """Copies every leaf to each local device (or `devices`), laid out as pmap expects.

  Unlike `flax.jax_utils.replicate` this stacks on the host, so no computation is compiled
  per leaf shape.
  """
  devices = devices or jax.local_devices()
  sharding = _stacked_sharding(devices)
  return jax.tree.map(
      lambda x: jax.device_put(np.stack([np.asarray(x)] * len(devices)), sharding), tree)


def _stacked_sharding(devices) -> jax.sharding.NamedSharding:
  """Arrays [len(devices), ...] with entry i on devices[i]: the layout pmap takes."""
  mesh = jax.sharding.Mesh(np.array(devices), ("replica",))
  return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("replica"))


def prefetch(items: Iterable[tuple[dict, Any]], time_multiple: int = 1,
             size: int = PREFETCH) -> Iterator[tuple[dict, Any]]:
  """(batch, tag) pairs with each batch `shard_batch`ed and already sent to the devices.

  `size` batches are copied ahead (the copy is asynchronous, so it overlaps the running
  step). The tag passes through unchanged: the training loop tags each batch with the data
  iterator's position after it, which is what a checkpoint after that batch must hold.
  """
  sharding = _stacked_sharding(jax.local_devices())
  items = iter(items)
  queue = collections.deque()

  def enqueue(count: int) -> None:
    for batch, tag in itertools.islice(items, count):
      queue.append((jax.device_put(shard_batch(batch, time_multiple), sharding), tag))

  enqueue(size)
  while queue:
    yield queue.popleft()
    enqueue(1)


def first_replica(tree):
  """The first device's copy of a pmapped tree, as host arrays (no device computation)."""
  return jax.tree.map(lambda x: np.array(np.asarray(x.addressable_data(0))[0]), tree)


def train_and_evaluate(config: ml_collections.ConfigDict, workdir) -> dict:
  """Trains (or resumes) a model in `workdir` and evaluates its best parameters.

  Args:
    config: the run's config (see configs/default.py).
    workdir: output directory (local or gs://): checkpoints, config.json, vocab.json,
      metrics.jsonl and TensorBoard events.

  Returns:
    {"params": best parameters (host), "step": their step, "epoch": their epoch,
     "valid": and "test": evaluation results (see `evaluate_batches`)}.
  """
  workdir = epath.Path(workdir)
  config, data, params = prepare(config, workdir)
  if jax.process_count() > 1:
    # Every process has checked the workdir before process 0 writes into it.
    multihost_utils.sync_global_devices("attnlm_jax: workdir checked")
  is_writer = jax.process_index() == 0
  shard = (jax.process_index(), jax.process_count())
  tc = config.train
  ckpt = checkpoints.Checkpoints(workdir, tc.save_every_steps)
  if is_writer:
    checkpoints.write_config_and_vocab(workdir, config, data.vocab)

  # Host arrays: every process saves and restores the same numpy tree (Orbax writes it once).
  state = jax.device_get(initial_state(config, params))
  meta = {"epoch": 0, "epoch_done": True, "iterator": None, "batches_done": 0,
          "early_stopping": schedules.EarlyStopping(tc.patience).to_dict()}
  latest = ckpt.latest_step()
  if latest is not None:
    state, meta = ckpt.restore(latest, state)
    logging.info("resuming from step %d (epoch %d) in %s", latest, meta["epoch"],
                 ckpt.directory)
  step = int(state["step"])
  stopping = schedules.EarlyStopping.from_dict(meta["early_stopping"])
  writer = logging_utils.MetricWriter(workdir, enabled=is_writer)
  writer.write_start(step, config.to_json_best_effort(sort_keys=True),
                     models.count_params(state["params"]),
                     devices=jax.device_count(), train_batches=data.num_train_batches(),
                     vocab_size=len(data.vocab),
                     unigram_valid_perplexity=losses.unigram_perplexity(
                         data.split("train").tokens, data.split("valid").tokens,
                         len(data.vocab)))

  optimizer = make_optimizer(tc)
  p_train_step = jax.pmap(
      functools.partial(accumulating_train_step, model_config=config.model,
                        optimizer=optimizer),
      axis_name=AXIS, donate_argnums=(0, 1, 2, 5))
  p_eval_step = pmapped_eval_step(config.model)
  p_params = replicate(state["params"])
  p_opt_state = replicate(state["opt_state"])
  p_rng = replicate(state["rng"])
  p_step = replicate(np.int32(step + 1))  # The number of the next step.
  num_batches = data.num_train_batches()

  def save(epoch, epoch_done, iterator_state, batches_done, valid_perplexity=None):
    ckpt.save(step, {"params": first_replica(p_params), "opt_state": first_replica(p_opt_state),
                     "rng": state["rng"], "step": np.asarray(step, np.int64)},
              {"epoch": epoch, "epoch_done": epoch_done, "iterator": iterator_state,
               "batches_done": batches_done, "early_stopping": stopping.to_dict()},
              valid_perplexity)

  first_epoch = meta["epoch"] + 1 if meta["epoch_done"] else meta["epoch"]
  for epoch in range(first_epoch, tc.num_epochs + 1):
    if stopping.should_stop:
      break
    lr = schedules.learning_rate(epoch, tc.learning_rate, tc.lr_decay_after,
                                 tc.lr_decay_divisor)
    p_lr = replicate(np.float32(lr))
    iterator = data.train_iterator(epoch, *shard)
    done = 0
    if epoch == meta["epoch"] and not meta["epoch_done"]:
      iterator.set_state(meta["iterator"])
      done = meta["batches_done"]
    progress = logging_utils.Progress(epoch, num_batches, done, enabled=is_writer)
    p_totals = replicate(zero_totals())
    for batch, position in prefetch((batch, iterator.get_state()) for batch in iterator):
      step += 1
      done += 1
      p_params, p_opt_state, p_totals, p_step = p_train_step(
          p_params, p_opt_state, p_totals, batch, p_rng, p_step, p_lr)
      progress.advance()
      if step % tc.log_every_steps == 0:
        totals = first_replica(p_totals)
        p_totals = replicate(zero_totals())
        loss = float(totals["nll"]) / max(int(totals["tokens"]), 1)
        rate = progress.report(step, loss, int(totals["tokens"]))
        writer.write_scalars(step, {"epoch": epoch, "train_loss": loss,
                                    "train_perplexity": math.exp(min(loss, 50.0)),
                                    "learning_rate": lr, "tokens_per_second": rate})
      if ckpt.should_save(step) and done < num_batches:
        save(epoch, False, position, done)
    progress.close()
    valid = evaluate_batches(p_eval_step, p_params,
                             data.eval_batches("valid", config.data.eval_batch_size, *shard))
    stopping = stopping.update(epoch, valid["perplexity"])
    save(epoch, True, None, num_batches, valid["perplexity"])
    writer.write_scalars(step, {
        "epoch": epoch, "learning_rate": lr, "valid_perplexity": valid["perplexity"],
        "valid_perplexity_paper_convention": valid["perplexity_paper_convention"],
        "best_epoch": stopping.best_epoch})
    logging.info("epoch %d: lr %.4g, valid perplexity %.2f (paper convention %.2f), best "
                 "epoch %d", epoch, lr, valid["perplexity"],
                 valid["perplexity_paper_convention"], stopping.best_epoch)

  ckpt.wait()
  best = ckpt.best_step()
  state, meta = ckpt.restore(best, state)
  ckpt.close()
  p_params = replicate(state["params"])
  results = {split: evaluate_batches(
      p_eval_step, p_params, data.eval_batches(split, config.data.eval_batch_size, *shard))
             for split in ("valid", "test")}
  writer.write_scalars(best, {"best_epoch": meta["epoch"], **{
      f"final_{split}_{key}": result[key] for split, result in results.items()
      for key in ("perplexity", "perplexity_paper_convention")}})
  writer.close()
  logging.info("best epoch %d (step %d): valid perplexity %.2f, test perplexity %.2f",
               meta["epoch"], best, results["valid"]["perplexity"],
               results["test"]["perplexity"])
  return {"params": state["params"], "step": best, "epoch": meta["epoch"], **results}
