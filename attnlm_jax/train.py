"""Training and validation of the language models: the loop.

`train_and_evaluate(config, workdir)` trains with the papers' recipe: SGD on
(summed token NLL / batch size) with the gradient clipped at global norm `grad_clip`
(`steps.TrainStep`), the learning rate of `schedules.learning_rate` for each epoch,
validation after every epoch, early stopping with patience and a roll-back to the best
epoch's parameters, then both perplexities of the best parameters on valid and test.

Data parallelism (`steps.py`): the global batch (`config.data.batch_size`) is split over the
devices; with one process per host, a multi-host run needs only `jax.distributed.initialize()`
before `train_and_evaluate` (`distributed.py`): each process reads its own rows of every
global batch of the same deterministic plan (`LMData.train_iterator`), all processes save
and restore the checkpoints together (Orbax), and only process 0 writes config, vocabulary,
logs and metrics (docs/multihost.md). The loop never waits for the devices between log
intervals: batches are sent ahead of use (`parallel.prefetch`), and the running sums of the
training metrics stay on the devices until a log interval ends.

The run is deterministic for a seed (and, with `config.train.grad_shards` set, for any device
count dividing it), and resumes from the latest readable checkpoint in `workdir` to the same
result as an uninterrupted run (`checkpoints.py`). A run whose loss stops being finite, or
grows past twice the loss of a uniform guess, is stopped (`TrainingDiverged`) before it
saves anything, so the last checkpoint stays good; its log ends with a `diverged` event.
SIGTERM or SIGINT (preemption, Ctrl-C) stop it after the step under way, with a checkpoint of
that step (`preemption.py`: `preemption.Stopped`), and a second run on the same workdir is
refused while the first holds its lock (`workdir_lock.py`).
"""

import functools
import math
import time

from absl import logging
from etils import epath
import jax
from jax.experimental import multihost_utils
import ml_collections
import numpy as np

from attnlm_jax import checkpoints
from attnlm_jax import data as data_lib
from attnlm_jax import errors
from attnlm_jax import logging_utils
from attnlm_jax import losses
from attnlm_jax import models
from attnlm_jax import parallel
from attnlm_jax import preemption
from attnlm_jax import schedules
from attnlm_jax import steps
from attnlm_jax import tagger
from attnlm_jax import workdir_lock
from attnlm_jax.errors import ConfigError


class TrainingDiverged(errors.UserError):
  """The loss stopped being finite or exploded; the message names the step and the lr."""

  def __init__(self, message: str, step: int, learning_rate: float, reason: str):
    super().__init__(message)
    self.step, self.learning_rate, self.reason = step, learning_rate, reason


def check_config(config: ml_collections.ConfigDict) -> None:
  """Raises ConfigError for training settings that cannot work (one line each)."""
  models.validate(config.model)
  devices = jax.device_count()
  for field in ("batch_size", "eval_batch_size"):
    if config.data[field] % devices:
      raise ConfigError(f"config.data.{field} = {config.data[field]} (the global batch) does "
                        f"not split over {devices} devices: use a multiple of {devices}")
  shards = config.train.grad_shards
  if shards and (shards % devices or config.data.batch_size % shards):
    raise ConfigError(f"config.train.grad_shards = {shards} must be a multiple of the "
                      f"{devices} devices and divide config.data.batch_size = "
                      f"{config.data.batch_size} (0: one shard per device)")
  for field in ("num_epochs", "patience", "log_every_steps"):
    if config.train[field] < 1:
      raise ConfigError(f"config.train.{field} = {config.train[field]} must be at least 1")
  if config.train.learning_rate <= 0:
    raise ConfigError(f"config.train.learning_rate = {config.train.learning_rate} must be "
                      "positive")
  if models.uses_batch_statistics(config.model) and config.data.bucket:
    raise ConfigError(f"config.model.score={config.model.score!r} normalises each step by "
                      "its batch's statistics, and config.data.bucket=True batches sentences "
                      "of nearly equal length, so a row could read from the others when its "
                      "own sentence ends (docs/models.md): set --config.data.bucket=false")


def prepare(config: ml_collections.ConfigDict, workdir, vocab=None, data=None):
  """Config with vocab_size (and num_tags) filled, the data, and initial parameters; checks
  the workdir.

  Args:
    config: the run's config (not modified).
    workdir: the run's directory; refused when its checkpoint does not fit the config.
    vocab: the vocabulary (None: built from the training split).
    data: the LMData to use (None: loaded from config.data with `vocab`).

  Returns:
    (config copy with model.vocab_size (and model.num_tags with pos_tags) set, LMData,
    initial params).
  """
  config = config.copy_and_resolve_references()
  tagger.set_lm_num_tags(config)
  data = data if data is not None else data_lib.load(config.data, vocab)
  config.model.vocab_size = len(data.vocab)
  check_config(config)
  init_rng, _ = jax.random.split(jax.random.PRNGKey(config.seed))
  params = jax.jit(functools.partial(models.init, config=config.model))(init_rng)
  if data.is_stream:
    models.init_stream_state(params, config.model, 1)  # Refuses models without a stream form.
  checkpoints.check_compatible(epath.Path(workdir), data.vocab, params)
  return config, data, params


def initial_state(config: ml_collections.ConfigDict, params: dict) -> dict:
  """The checkpointed training state before the first step (host arrays); under the stream
  protocol with the state every training row carries ("carry")."""
  opt_state = steps.make_optimizer(config.train).init(models.trainable(params))
  _, dropout_rng = jax.random.split(jax.random.PRNGKey(config.seed))
  state = {"params": params, "opt_state": opt_state, "rng": dropout_rng,
           "step": np.zeros((), np.int64)}
  if config.data.span == "stream":
    state["carry"] = steps.initial_carry(params, config.model, config.data.batch_size)
  return state


def divergence(mean_loss: float, vocab_size: int) -> str | None:
  """Why a mean training loss (nats per token) means the run has diverged, or None: not
  finite, or more than twice the loss of a uniform guess over the vocabulary."""
  if not math.isfinite(mean_loss):
    return f"the training loss is {mean_loss}"
  if mean_loss > 2 * math.log(vocab_size):
    return (f"the training loss is {mean_loss:.4g} nats per token, more than twice a uniform "
            f"guess's {math.log(vocab_size):.3g}")
  return None


def _diverged(reason: str, step: int, lr: float, last_good) -> TrainingDiverged:
  """The one-line error of a diverged run."""
  then = (f"the last good checkpoint (step {last_good}) is kept: rerun with a smaller "
          f"--config.train.learning_rate (e.g. {lr / 10:g}) to resume from it"
          if last_good is not None else "nothing was saved: rerun with a smaller "
          f"--config.train.learning_rate (e.g. {lr / 10:g})")
  return TrainingDiverged(f"training diverged at step {step} (learning rate {lr:g}): "
                          f"{reason}; {then}", step, lr, reason)


def _lock_workdir(workdir: epath.Path) -> workdir_lock.WorkdirLock:
  """The workdir's lock, taken by process 0; every process raises WorkdirBusy when another
  run holds it (and, with several processes, waits until all have checked the workdir)."""
  lock = workdir_lock.WorkdirLock(workdir, enabled=jax.process_index() == 0)
  refusal = None
  try:
    lock.acquire()
  except workdir_lock.WorkdirBusy as e:
    refusal = e
  if jax.process_count() > 1:
    busy = multihost_utils.broadcast_one_to_all(np.int32(refusal is not None))
    if busy and refusal is None:
      refusal = workdir_lock.WorkdirBusy(f"process 0 found {workdir} in use by another "
                                         "training run (its log names it)")
  if refusal is not None:
    raise refusal
  return lock


def step_compilations(train_step: steps.TrainStep, evaluator: steps.Evaluator,
                      p_state: steps.TrainState, p_rng: jax.Array, data: data_lib.LMData,
                      epoch: int, config: ml_collections.ConfigDict) -> tuple[list, list[int]]:
  """The compilations (for `steps.compile_side_by_side`) of the training step for every batch
  width of `epoch` and of the evaluation step for every batch shape of valid and test; and
  the widths."""
  widths = data.train_widths(epoch)
  sample = next(iter(data.train_iterator(epoch, jax.process_index(), jax.process_count())))
  return (train_step.compilations(p_state, p_rng, sample, widths)
          + evaluator.compilations(p_state.params, data, ("valid", "test"),
                                   config.data.eval_batch_size)), widths


def compile_steps(train_step: steps.TrainStep, evaluator: steps.Evaluator,
                  p_state: steps.TrainState, p_rng: jax.Array, data: data_lib.LMData,
                  epoch: int, config: ml_collections.ConfigDict) -> None:
  """Compiles `step_compilations` side by side (`steps.compile_side_by_side`)."""
  started = time.monotonic()
  compilations, widths = step_compilations(train_step, evaluator, p_state, p_rng, data, epoch,
                                           config)
  steps.compile_side_by_side(compilations)
  logging.info("compiled the steps for %d training batch widths (%s) and the evaluation in "
               "%.1f s", len(widths), ", ".join(map(str, widths)), time.monotonic() - started)


def train_and_evaluate(config: ml_collections.ConfigDict, workdir, data=None) -> dict:
  """Trains (or resumes) a model in `workdir` and evaluates its best parameters.

  Args:
    config: the run's config (see configs/default.py).
    workdir: output directory (local or gs://): checkpoints, config.json, vocab.json,
      metrics.jsonl and TensorBoard events.
    data: the corpus as an LMData of config.data (None: loaded from config.data); e.g. a
      `first_batches` view of it.

  Returns:
    {"params": best parameters (host), "step": their step, "epoch": their epoch,
     "epochs": epochs trained, "train_seconds": time spent training (all sessions of the run),
     "valid": and "test": evaluation results (see `steps.Evaluator`)}.

  Raises:
    TrainingDiverged: the loss stopped being finite or exploded (nothing bad was saved).
    checkpoints.CheckpointError: no checkpoint of the workdir can be read.
    workdir_lock.WorkdirBusy: another training run holds the workdir (nothing is written).
    preemption.Stopped: SIGTERM or SIGINT stopped the run, after a checkpoint of the last
      step taken (rerunning resumes from it).
  """
  workdir = epath.Path(workdir)
  config, data, params = prepare(config, workdir, data=data)
  with preemption.StopSignals() as stop, _lock_workdir(workdir):
    return _train_and_evaluate(config, data, params, workdir, stop)


def _train_and_evaluate(config: ml_collections.ConfigDict, data: data_lib.LMData,
                        params: dict, workdir: epath.Path,
                        stop: preemption.StopSignals) -> dict:
  """`train_and_evaluate` once the workdir is checked and locked: trains from `params` (or
  the latest checkpoint), stopping cleanly when `stop` says so."""
  is_writer = jax.process_index() == 0
  shard = (jax.process_index(), jax.process_count())
  tc = config.train
  ckpt = checkpoints.Checkpoints(workdir, tc.save_every_steps)
  if is_writer:
    checkpoints.write_config_and_vocab(workdir, config, data.vocab)

  # Host arrays: every process saves and restores the same numpy tree (Orbax writes it once).
  state = jax.device_get(initial_state(config, params))
  meta = {"epoch": 0, "epoch_done": True, "iterator": None, "batches_done": 0,
          "train_seconds": 0.0,
          "early_stopping": schedules.EarlyStopping(tc.patience).to_dict()}
  restored = ckpt.restore_latest(state)
  if restored is not None:
    state, meta = restored
    logging.info("resuming from step %d (epoch %d) in %s", int(state["step"]), meta["epoch"],
                 ckpt.directory)
  step = int(state["step"])
  last_good = step if restored is not None else None
  stopping = schedules.EarlyStopping.from_dict(meta["early_stopping"])
  vocab_size = len(data.vocab)
  writer = logging_utils.MetricWriter(workdir, enabled=is_writer)
  writer.write_start(step, config.to_json_best_effort(sort_keys=True),
                     models.count_params(state["params"]),
                     platform=jax.default_backend(), devices=jax.device_count(),
                     device_kind=jax.devices()[0].device_kind,
                     host_cpus=logging_utils.host_cpus(),
                     cpu_model=logging_utils.cpu_model(),
                     code_version=logging_utils.code_version(),
                     train_batches=data.num_train_batches(),
                     vocab_size=vocab_size,
                     unigram_valid_perplexity=losses.unigram_perplexity(
                         data.split("train").tokens, data.split("valid").tokens, vocab_size))

  train_step = steps.TrainStep(config)
  evaluator = steps.Evaluator(config.model)
  p_state = train_step.initial_state(state["params"], state["opt_state"], step)
  p_rng = parallel.replicate(state["rng"])
  num_batches = data.num_train_batches()
  first_carry = (steps.initial_carry(state["params"], config.model, config.data.batch_size)
                 if data.is_stream else None)
  seconds_before_this_session = meta.get("train_seconds", 0.0)
  session_start = time.monotonic()

  def train_seconds() -> float:
    """Time spent training (after setup), summed over this session and the ones before."""
    return seconds_before_this_session + time.monotonic() - session_start

  def save(epoch, epoch_done, iterator_state, batches_done, carries, valid_perplexity=None):
    nonlocal last_good
    saved = {"params": parallel.first_replica(p_state.params),
             "opt_state": parallel.first_replica(p_state.opt_state),
             "rng": state["rng"], "step": np.asarray(step, np.int64)}
    if data.is_stream:  # An epoch's end saves the state the next epoch starts from.
      saved["carry"] = (train_step.carries_to_host(carries) if carries is not None
                        else first_carry)
    saved_meta = {"epoch": epoch, "epoch_done": epoch_done, "iterator": iterator_state,
                  "batches_done": batches_done, "train_seconds": train_seconds(),
                  "early_stopping": stopping.to_dict()}
    if not epoch_done:  # The epoch's training loss so far, for its record after a resume.
      pending = parallel.first_replica(p_state.totals)
      saved_meta["epoch_sums"] = {"nll": epoch_sums["nll"] + float(pending["nll"]),
                                  "tokens": epoch_sums["tokens"] + int(pending["tokens"])}
    ckpt.save(step, saved, saved_meta, valid_perplexity)
    last_good = step

  def stopped(epoch: int, batch: int) -> preemption.Stopped:
    """The exception ending a run stopped by a signal (its checkpoint saved)."""
    return preemption.Stopped(stop.received,
                              preemption.stopped_message(stop.received, step, epoch, batch))

  first_epoch = meta["epoch"] + 1 if meta["epoch_done"] else meta["epoch"]
  epochs = meta["epoch"] if meta["epoch_done"] else meta["epoch"] - 1
  if not data.is_stream and first_epoch <= tc.num_epochs and not stopping.should_stop:
    compile_steps(train_step, evaluator, p_state, p_rng, data, first_epoch, config)
  try:
    for epoch in range(first_epoch, tc.num_epochs + 1):
      if stopping.should_stop:
        break
      lr = schedules.learning_rate(epoch, tc.learning_rate, tc.lr_decay_after,
                                   tc.lr_decay_divisor)
      p_lr = parallel.replicate(np.float32(lr))
      iterator = data.train_iterator(epoch, *shard)
      done = 0
      resuming = epoch == meta["epoch"] and not meta["epoch_done"]
      if resuming:
        iterator.set_state(meta["iterator"])
        done = meta["batches_done"]
      carries = None
      if data.is_stream:
        carries = train_step.carries_from_host(state["carry"] if resuming else first_carry)
      progress = logging_utils.Progress(epoch, num_batches, done, enabled=is_writer)
      epoch_sums = {"nll": 0.0, "tokens": 0}
      if resuming:  # Checkpoints written before the field existed lack it.
        epoch_sums.update(meta.get("epoch_sums", {}))

      def read_totals(reset: bool) -> dict:
        """The training sums since the last reset (waits for the devices); raises
        TrainingDiverged when they show divergence."""
        nonlocal p_state
        totals = parallel.first_replica(p_state.totals)
        if reset:
          p_state = p_state._replace(totals=parallel.replicate(steps.zero_totals()))
          epoch_sums["nll"] += float(totals["nll"])
          epoch_sums["tokens"] += int(totals["tokens"])
        mean = float(totals["nll"]) / max(int(totals["tokens"]), 1)
        reason = (f"the loss of {int(totals['nonfinite'])} step(s) was not finite"
                  if totals["nonfinite"] else divergence(mean, vocab_size))
        if reason:
          raise _diverged(reason, step, lr, last_good)
        return {"loss": mean, "tokens": int(totals["tokens"])}

      for placed, position in parallel.prefetch(
          ((batch, iterator.get_state()) for batch in iterator), train_step.place):
        step += 1
        done += 1
        p_state, carries = train_step(p_state, placed, p_rng, p_lr, carries)
        progress.advance()
        if progress.needs_clock():
          progress.start_clock(read_totals(reset=False)["tokens"])
        if step % tc.log_every_steps == 0:
          totals = read_totals(reset=True)
          rate = progress.report(step, totals["loss"], totals["tokens"])
          writer.write_scalars(step, {"epoch": epoch, "train_loss": totals["loss"],
                                      "train_perplexity": math.exp(min(totals["loss"], 50.0)),
                                      "learning_rate": lr, "tokens_per_second": rate})
        if ckpt.should_save(step) and done < num_batches:
          read_totals(reset=False)
          save(epoch, False, position, done, carries)
        if stop.should_stop(step):
          break
      progress.close()
      if stop.received is not None and done < num_batches:
        read_totals(reset=False)
        if last_good != step:
          save(epoch, False, position, done, carries)
        raise stopped(epoch, done)
      read_totals(reset=True)
      valid = evaluator(p_state.params, data, "valid", config.data.eval_batch_size)
      if not math.isfinite(valid["perplexity"]):
        raise _diverged(f"the validation perplexity is {valid['perplexity']} (mean NLL "
                        f"{valid['nll'] / valid['tokens']:.4g} nats per token)", step, lr,
                        last_good)
      epochs = epoch
      stopping = stopping.update(epoch, valid["perplexity"])
      save(epoch, True, None, num_batches, None, valid["perplexity"])
      train_loss = epoch_sums["nll"] / max(epoch_sums["tokens"], 1)
      writer.write_scalars(step, {
          "epoch": epoch, "learning_rate": lr, "epoch_train_loss": train_loss,
          "valid_perplexity": valid["perplexity"],
          "valid_perplexity_paper_convention": valid["perplexity_paper_convention"],
          "best_epoch": stopping.best_epoch, "train_seconds": train_seconds()})
      logging.info("epoch %d: lr %.4g, train loss %.4f, valid perplexity %.2f (paper convention "
                   "%.2f), best epoch %d", epoch, lr, train_loss, valid["perplexity"],
                   valid["perplexity_paper_convention"], stopping.best_epoch)
      if stop.received is not None:
        raise stopped(epoch, num_batches)
    if stop.received is not None:  # Before the final evaluation: every epoch is saved.
      raise stopped(epochs, num_batches)
  except BaseException as error:
    if isinstance(error, TrainingDiverged):  # The log says why it ends.
      writer.write_event("diverged", error.step, learning_rate=error.learning_rate,
                         reason=error.reason)
    ckpt.close()  # Finishes the saves under way, so the last good checkpoint is whole.
    writer.close()  # A remote workdir gets the log records written so far.
    raise
  ckpt.wait()
  best = ckpt.best_step()
  state, meta = ckpt.restore(best, state)
  ckpt.close()
  p_params = parallel.replicate(state["params"])
  results = {split: evaluator(p_params, data, split, config.data.eval_batch_size)
             for split in ("valid", "test")}
  writer.write_scalars(best, {"best_epoch": meta["epoch"], "epochs": epochs, **{
      f"final_{split}_{key}": result[key] for split, result in results.items()
      for key in ("perplexity", "perplexity_paper_convention")}})
  writer.close()
  logging.info("best epoch %d (step %d): valid perplexity %.2f, test perplexity %.2f",
               meta["epoch"], best, results["valid"]["perplexity"],
               results["test"]["perplexity"])
  return {"params": state["params"], "step": best, "epoch": meta["epoch"], "epochs": epochs,
          "train_seconds": train_seconds(), **results}


def summary(result: dict, workdir) -> dict:
  """The one-line JSON record of a finished `train_and_evaluate` (what `main` prints)."""
  return {"workdir": str(workdir), "best_epoch": result["epoch"], "best_step": result["step"],
          "epochs": result["epochs"],
          **{f"{split}_{key}": result[split][key] for split in ("valid", "test")
             for key in ("perplexity", "perplexity_paper_convention")},
          "train_seconds": round(result["train_seconds"], 1)}
