"""The training loop: `train_and_evaluate(config, workdir)`.

The papers' recipe: SGD with the gradient clipped (`steps.TrainStep`), the learning rate of
`schedules.learning_rate` for each epoch, validation after every epoch, early stopping with a
roll-back to the best epoch, then both perplexities of its parameters on valid and test. A run
resumes from its latest checkpoint to the same result as an uninterrupted one, stops before
saving anything once its loss diverges, and saves and ends on SIGTERM or SIGINT
(docs/training.md).
"""

import collections
import functools
import math
import time

from absl import logging
from etils import epath
import jax
from jax.experimental import multihost_utils
import ml_collections
import numpy as np

from attnlm_jax.common import errors
from attnlm_jax.common import logging_utils
from attnlm_jax.common import provenance
from attnlm_jax import data as data_lib
from attnlm_jax import models
from attnlm_jax.models import losses
from attnlm_jax.tagger import tagging
from attnlm_jax.training import checkpoints
from attnlm_jax.training import parallel
from attnlm_jax.training import preemption
from attnlm_jax.training import run_config
from attnlm_jax.training import schedules
from attnlm_jax.training import steps
from attnlm_jax.training import workdir_lock


class TrainingDiverged(errors.UserError):
  """The loss stopped being finite or exploded; the message names the step and the lr."""

  def __init__(self, message: str, step: int, learning_rate: float, reason: str):
    super().__init__(message)
    self.step, self.learning_rate, self.reason = step, learning_rate, reason


def prepare(config: ml_collections.ConfigDict, workdir, vocab=None, data=None):
  """The completed config (`run_config.complete`, checked for training), the data (valid and
  test read too, so that a missing or bad file is refused before the workdir is written) and
  the initial parameters; refuses a workdir whose config or checkpoint does not fit them.

  Args:
    config: the run's config (not modified).
    workdir: the run's directory.
    vocab: the vocabulary (None: built from the training split).
    data: the LMData to use (None: loaded from config.data with `vocab`).
  """
  if data is None:
    data = data_lib.load(config.data, vocab, tagging.corpus_tags(config))
  for split in ("valid", "test"):
    data.split(split)
  config = run_config.complete(config, len(data.vocab))
  run_config.check_training(config)
  init_rng, _ = jax.random.split(jax.random.PRNGKey(config.seed))
  params = jax.jit(functools.partial(models.init, config=config.model))(init_rng)
  if data.is_stream:
    models.init_stream_state(params, config.model, 1)  # Refuses models without a stream form.
  checkpoints.check_config(epath.Path(workdir), config)
  checkpoints.check_compatible(epath.Path(workdir), data.vocab, params)
  if config.model.pos_tags:
    checkpoints.check_tagger(epath.Path(workdir), config.data)
  return config, data, params


def divergence(mean_loss: float, vocab_size: int) -> str | None:
  """Why a mean training loss (nats per token) means the run has diverged, or None: not
  finite, or more than twice the loss of a uniform guess over the vocabulary."""
  if not math.isfinite(mean_loss):
    return f"the training loss is {mean_loss}"
  if mean_loss > 2 * math.log(vocab_size):
    return (f"the training loss is {mean_loss:.4g} nats per token, more than twice a uniform "
            f"guess's {math.log(vocab_size):.3g}")
  return None


# The fewest training steps whose mean loss the divergence check judges, as far back as the
# session goes: a lone step's spike is not divergence, however often the loss is logged (the
# demo at learning rate 1.0 has steps above twice a uniform guess's loss, and recovers).
DIVERGENCE_MIN_STEPS = 50


class RecentLoss:
  """The summed loss of the latest log intervals of a session, back to DIVERGENCE_MIN_STEPS
  steps: what `divergence` judges."""

  def __init__(self):
    self._intervals = collections.deque()   # (steps, summed NLL, tokens), oldest first.

  def mean(self, num_steps: int, nll: float, tokens: int) -> float:
    """The mean loss (nats per token) of an interval of `num_steps` steps (`nll` summed over
    `tokens`) together with the intervals before it, back to DIVERGENCE_MIN_STEPS steps."""
    for earlier_steps, earlier_nll, earlier_tokens in reversed(self._intervals):
      if num_steps >= DIVERGENCE_MIN_STEPS:
        break
      num_steps += earlier_steps
      nll, tokens = nll + earlier_nll, tokens + earlier_tokens
    return nll / max(tokens, 1)

  def add(self, num_steps: int, nll: float, tokens: int) -> None:
    """Records a finished interval, forgetting those no later `mean` needs (a later interval
    has a step at least)."""
    self._intervals.append((num_steps, nll, tokens))
    while sum(s for s, _, _ in list(self._intervals)[1:]) >= DIVERGENCE_MIN_STEPS - 1:
      self._intervals.popleft()


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
    return _Session(config, data, params, workdir, stop).run()


class _Session:
  """One session of a run, once its workdir is checked and locked: restores the latest
  checkpoint (or starts from `params`), trains the epochs left, stopping cleanly when `stop`
  says so, and evaluates the best epoch's parameters."""

  def __init__(self, config: ml_collections.ConfigDict, data: data_lib.LMData, params: dict,
               workdir: epath.Path, stop: preemption.StopSignals):
    self.config, self.data, self.stop = config, data, stop
    self.is_writer = jax.process_index() == 0
    self.ckpt = checkpoints.Checkpoints(workdir, config.train.save_every_steps)
    if self.is_writer:
      checkpoints.write_config_and_vocab(workdir, config, data.vocab)
    restored = self._restore(params)
    self.step = int(self.state["step"])
    self.last_good = self.step if restored else None   # The step of the last checkpoint.
    self.stopping = schedules.EarlyStopping.from_dict(self.meta["early_stopping"])
    self.plateau = schedules.PlateauDecay.from_dict(self.meta["plateau"])
    self.writer = logging_utils.MetricWriter(workdir, enabled=self.is_writer)
    self._write_start()
    self.train_step = steps.TrainStep(config)
    self.evaluator = steps.Evaluator(config.model)
    self.p_state = self.train_step.initial_state(self.state["params"],
                                                 self.state["opt_state"], self.step)
    self.p_rng = parallel.replicate(self.state["rng"])
    self.num_batches = data.num_train_batches()
    self.first_carry = (steps.initial_carry(self.state["params"], config.model,
                                            config.data.batch_size)
                        if data.is_stream else None)
    self.seconds_before = self.meta["train_seconds"]  # Of the sessions before.
    self.session_start = time.monotonic()
    self.lr = None                             # The learning rate of the epoch under way.
    self.epoch_sums = {"nll": 0.0, "tokens": 0}  # Its training loss so far.
    self.epochs = 0                            # Epochs finished.
    self.recent_loss = RecentLoss()            # The loss the divergence check judges.
    self.totals_from = self.step               # The step the device's sums start after.

  def _restore(self, params: dict) -> bool:
    """Sets the host state and its meta from the latest checkpoint, or the initial ones;
    True when a checkpoint was restored. A meta key that older checkpoints lack keeps its
    initial value. Host arrays: every process saves and restores the same numpy tree (Orbax
    writes it once)."""
    self.state = jax.device_get(steps.initial_state(self.config, params))
    self.meta = {"epoch": 0, "epoch_done": True, "iterator": None, "batches_done": 0,
                 "train_seconds": 0.0,
                 "early_stopping": schedules.EarlyStopping(self.config.train.patience).to_dict(),
                 "plateau": schedules.PlateauDecay(
                     self.config.train.lr_plateau_improvement,
                     self.config.train.lr_plateau_patience).to_dict()}
    restored = self.ckpt.restore_latest(self.state)
    if restored is not None:
      self.state, saved_meta = restored
      self.meta = {**self.meta, **saved_meta}
      logging.info("resuming from step %d (epoch %d) in %s", int(self.state["step"]),
                   self.meta["epoch"], self.ckpt.directory)
    return restored is not None

  def _write_start(self) -> None:
    """The log's start record: the config, the model's size and where it trains."""
    vocab_size = len(self.data.vocab)
    self.writer.write_start(
        self.step, self.config.to_json_best_effort(sort_keys=True),
        models.count_params(self.state["params"]), platform=jax.default_backend(),
        devices=jax.device_count(), device_kind=jax.devices()[0].device_kind,
        host_cpus=provenance.host_cpus(), cpu_model=provenance.cpu_model(),
        cpu_features=provenance.cpu_features(),
        code_version=provenance.code_version(), versions=provenance.library_versions(),
        train_batches=self.data.num_train_batches(), vocab_size=vocab_size,
        unigram_valid_perplexity=losses.unigram_perplexity(
            self.data.split("train").tokens, self.data.split("valid").tokens, vocab_size))

  def train_seconds(self) -> float:
    """Time spent training (after setup), summed over this session and the ones before."""
    return self.seconds_before + time.monotonic() - self.session_start

  def run(self) -> dict:
    """Trains the epochs left, then evaluates the best epoch (`train_and_evaluate`)."""
    meta, num_epochs = self.meta, self.config.train.num_epochs
    first_epoch = meta["epoch"] + 1 if meta["epoch_done"] else meta["epoch"]
    self.epochs = meta["epoch"] if meta["epoch_done"] else meta["epoch"] - 1
    if (not self.data.is_stream and first_epoch <= num_epochs
        and not self._ends_before(first_epoch)):
      compile_steps(self.train_step, self.evaluator, self.p_state, self.p_rng, self.data,
                    first_epoch, self.config)
    try:
      for epoch in range(first_epoch, num_epochs + 1):
        if self._ends_before(epoch):
          break
        self._train_epoch(epoch)
        self._validate(epoch)
      if self.stop.received is not None:  # Before the final evaluation: every epoch is saved.
        raise self._stopped(self.epochs, self.num_batches)
    except BaseException as error:
      if isinstance(error, TrainingDiverged):  # The log says why it ends.
        self.writer.write_event("diverged", error.step, learning_rate=error.learning_rate,
                                reason=error.reason)
      self.ckpt.close()  # Finishes the saves under way, so the last good checkpoint is whole.
      self.writer.close()  # A remote workdir gets the log records written so far.
      raise
    return self._final_evaluation()

  def _ends_before(self, epoch: int) -> bool:
    """Whether training ends before `epoch`: `patience` epochs went by without improving, or
    the epoch's learning rate is below `config.train.min_learning_rate`."""
    tc = self.config.train
    return (self.stopping.should_stop
            or schedules.epoch_learning_rate(tc, epoch, self.plateau) < tc.min_learning_rate)

  def _train_epoch(self, epoch: int) -> None:
    """The training steps of `epoch` (from where a resumed session left it), logging the
    loss every `log_every_steps` and saving every `save_every_steps`; on a signal, saves and
    raises preemption.Stopped."""
    tc, meta = self.config.train, self.meta
    self.lr = schedules.epoch_learning_rate(tc, epoch, self.plateau)
    p_lr = parallel.replicate(np.float32(self.lr))
    iterator = self.data.train_iterator(epoch, jax.process_index(), jax.process_count())
    resuming = epoch == meta["epoch"] and not meta["epoch_done"]
    done = meta["batches_done"] if resuming else 0
    if resuming:
      iterator.set_state(meta["iterator"])
    carries = None
    if self.data.is_stream:
      carries = self.train_step.carries_from_host(self.state["carry"] if resuming
                                                  else self.first_carry)
    progress = logging_utils.Progress(epoch, self.num_batches, done, enabled=self.is_writer)
    self.epoch_sums = {"nll": 0.0, "tokens": 0}
    if resuming:  # Checkpoints written before the field existed lack it.
      self.epoch_sums.update(meta.get("epoch_sums", {}))
    for placed, position in parallel.prefetch(
        ((batch, iterator.get_state()) for batch in iterator), self.train_step.place):
      self.step += 1
      done += 1
      self.p_state, carries = self.train_step(self.p_state, placed, self.p_rng, p_lr, carries)
      progress.advance()
      if progress.needs_clock():
        progress.start_clock(self._read_totals(reset=False)["tokens"])
      if self.step % tc.log_every_steps == 0:
        totals = self._read_totals(reset=True)
        rate = progress.report(self.step, totals["loss"], totals["tokens"])
        self.writer.write_scalars(self.step, {
            "epoch": epoch, "train_loss": totals["loss"],
            "train_perplexity": math.exp(min(totals["loss"], 50.0)),
            "learning_rate": self.lr, "tokens_per_second": rate})
      if self.ckpt.should_save(self.step) and done < self.num_batches:
        self._read_totals(reset=False)
        self._save(epoch, False, position, done, carries)
      if self.stop.should_stop(self.step):
        break
    progress.close()
    if self.stop.received is not None and done < self.num_batches:
      self._read_totals(reset=False)
      if self.last_good != self.step:
        self._save(epoch, False, position, done, carries)
      raise self._stopped(epoch, done)
    self._read_totals(reset=True)

  def _validate(self, epoch: int) -> None:
    """Validates the epoch's parameters, updates early stopping, saves and logs the epoch;
    on a signal received meanwhile, raises preemption.Stopped."""
    valid = self.evaluator(self.p_state.params, self.data, "valid",
                           self.config.data.eval_batch_size)
    if not math.isfinite(valid["perplexity"]):
      raise _diverged(f"the validation perplexity is {valid['perplexity']} (mean NLL "
                      f"{valid['nll'] / valid['tokens']:.4g} nats per token)", self.step,
                      self.lr, self.last_good)
    self.epochs = epoch
    self.stopping = self.stopping.update(epoch, valid["perplexity"])
    self.plateau = self.plateau.update(valid["perplexity"])
    self._save(epoch, True, None, self.num_batches, None, valid["perplexity"])
    train_loss = self.epoch_sums["nll"] / max(self.epoch_sums["tokens"], 1)
    self.writer.write_scalars(self.step, {
        "epoch": epoch, "learning_rate": self.lr, "epoch_train_loss": train_loss,
        "valid_perplexity": valid["perplexity"],
        "valid_perplexity_paper_convention": valid["perplexity_paper_convention"],
        "best_epoch": self.stopping.best_epoch, "train_seconds": self.train_seconds()})
    logging.info("epoch %d: lr %.4g, train loss %.4f, valid perplexity %.2f (paper convention "
                 "%.2f), best epoch %d", epoch, self.lr, train_loss, valid["perplexity"],
                 valid["perplexity_paper_convention"], self.stopping.best_epoch)
    if self.stop.received is not None:
      raise self._stopped(epoch, self.num_batches)

  def _final_evaluation(self) -> dict:
    """Restores the best epoch's parameters and evaluates them on valid and test; a signal
    now stops the run at once (its training is saved)."""
    self.ckpt.wait()
    self.stop.at_once("stopped by {signal} before the final evaluation: the run is trained and "
                      "saved; rerun the same command to evaluate it")
    best = self.ckpt.best_step()
    state, meta = self.ckpt.restore_evaluated(best, self.state)
    evaluated_perplexity = self.ckpt.valid_perplexity(best)
    self.ckpt.close()
    missing = {}
    # Above the best epoch's (of two tied epochs the checkpoints may keep the other one): the
    # run resumed from a latest checkpoint copied alone.
    if evaluated_perplexity > self.stopping.best_perplexity:
      logging.warning("the best epoch's checkpoint (epoch %d, valid perplexity %.2f) is not in "
                      "%s: evaluating the best one there, epoch %d's", self.stopping.best_epoch,
                      self.stopping.best_perplexity, self.ckpt.directory, meta["epoch"])
      missing = {"best_valid_epoch_without_checkpoint": self.stopping.best_epoch}
    p_params = parallel.replicate(state["params"])
    results = {split: self.evaluator(p_params, self.data, split,
                                     self.config.data.eval_batch_size)
               for split in ("valid", "test")}
    self.writer.write_scalars(best, {"best_epoch": meta["epoch"], "epochs": self.epochs, **{
        f"final_{split}_{key}": result[key] for split, result in results.items()
        for key in ("perplexity", "perplexity_paper_convention")}, **missing})
    self.writer.close()
    logging.info("best epoch %d (step %d): valid perplexity %.2f, test perplexity %.2f",
                 meta["epoch"], best, results["valid"]["perplexity"],
                 results["test"]["perplexity"])
    return {"params": state["params"], "step": best, "epoch": meta["epoch"],
            "epochs": self.epochs, "train_seconds": self.train_seconds(), **results}

  def _read_totals(self, reset: bool) -> dict:
    """The training sums since the last reset (waits for the devices); raises
    TrainingDiverged when they, with the intervals before them (`RecentLoss`), show
    divergence."""
    totals = parallel.first_replica(self.p_state.totals)
    nll, tokens = float(totals["nll"]), int(totals["tokens"])
    steps_summed = self.step - self.totals_from
    if reset:
      self.p_state = self.p_state._replace(totals=parallel.replicate(steps.zero_totals()))
      self.epoch_sums["nll"] += nll
      self.epoch_sums["tokens"] += tokens
    reason = (f"the loss of {int(totals['nonfinite'])} step(s) was not finite"
              if totals["nonfinite"] else
              divergence(self.recent_loss.mean(steps_summed, nll, tokens), len(self.data.vocab)))
    if reason:
      raise _diverged(reason, self.step, self.lr, self.last_good)
    if reset:
      self.recent_loss.add(steps_summed, nll, tokens)
      self.totals_from = self.step
    return {"loss": nll / max(tokens, 1), "tokens": tokens}

  def _save(self, epoch: int, epoch_done: bool, iterator_state, batches_done: int, carries,
            valid_perplexity=None) -> None:
    """A checkpoint of the step just taken, with where the epoch stands."""
    saved = {"params": parallel.first_replica(self.p_state.params),
             "opt_state": parallel.first_replica(self.p_state.opt_state),
             "rng": self.state["rng"], "step": np.asarray(self.step, np.int64)}
    if self.data.is_stream:  # An epoch's end saves the state the next epoch starts from.
      saved["carry"] = (self.train_step.carries_to_host(carries) if carries is not None
                        else self.first_carry)
    saved_meta = {"epoch": epoch, "epoch_done": epoch_done, "iterator": iterator_state,
                  "batches_done": batches_done, "train_seconds": self.train_seconds(),
                  "early_stopping": self.stopping.to_dict(), "plateau": self.plateau.to_dict()}
    if not epoch_done:  # The epoch's training loss so far, for its record after a resume.
      pending = parallel.first_replica(self.p_state.totals)
      saved_meta["epoch_sums"] = {"nll": self.epoch_sums["nll"] + float(pending["nll"]),
                                  "tokens": self.epoch_sums["tokens"] + int(pending["tokens"])}
    self.ckpt.save(self.step, saved, saved_meta, valid_perplexity)
    self.last_good = self.step

  def _stopped(self, epoch: int, batch: int) -> preemption.Stopped:
    """The exception ending a run stopped by a signal (its checkpoint saved)."""
    return preemption.Stopped(self.stop.received, preemption.stopped_message(
        self.stop.received, self.step, epoch, batch))


def summary(result: dict, workdir) -> dict:
  """The one-line JSON record of a finished `train_and_evaluate` (what `main` prints)."""
  return {"workdir": str(workdir), "best_epoch": result["epoch"], "best_step": result["step"],
          "epochs": result["epochs"],
          **{f"{split}_{key}": result[split][key] for split in ("valid", "test")
             for key in ("perplexity", "perplexity_paper_convention")},
          "train_seconds": round(result["train_seconds"], 1)}
