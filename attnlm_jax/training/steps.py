"""The data-parallel training step and the evaluation steps.

`TrainStep`: SGD on (summed token NLL) / (batch size), the gradient clipped at global norm
`grad_clip`; the global batch is cut into `grad_shards` shards, each shard's gradient one jitted
program on its device, summed pairwise and averaged over the devices by a pmapped update, so
that a fixed number of shards gives bitwise the same run on any number of devices.
`Evaluator`: both perplexities' sums, pmapped. Every program a run needs is compiled before
its first step, side by side (docs/training.md, "Devices" and "Compiling")."""

import concurrent.futures
import functools
from typing import Any, Callable, NamedTuple, Optional, Sequence

import jax
from jax.experimental import multihost_utils
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from attnlm_jax.common import provenance
from attnlm_jax import models
from attnlm_jax.models import losses
from attnlm_jax.training import parallel

AXIS = parallel.AXIS
# Evaluation batches are padded in time to a multiple of this, to bound recompilations.
EVAL_TIME_MULTIPLE = 16
# Train fields added since runs were first saved, with the values that keep the behaviour from
# before them (what a saved config.json without them means).
ADDED_FIELDS = {"head_lr_factor": 1.0, "lr_schedule": "epochs", "lr_plateau_improvement": 0.0,
                "lr_plateau_patience": 1, "min_learning_rate": 0.0}


def make_optimizer(train_config: ml_collections.ConfigDict) -> optax.GradientTransformation:
  """SGD on the gradient clipped at global norm `grad_clip`; the lr is a state hyperparameter.

  The learning rate lives in `opt_state.hyperparams["learning_rate"]` (optax
  inject_hyperparams), so the update sets it per epoch and checkpoints carry it. With
  `head_lr_factor` f != 1 the output layer h'_t (`params["head"]`) steps f times as far as
  the other parameters: theta_head <- theta_head - f * lr * clip(g)_head. The factor is not
  state: the optimizer state, and so a checkpoint, is the same whatever f.
  """
  def sgd_with_clipping(learning_rate, grad_clip):
    return optax.chain(optax.clip_by_global_norm(grad_clip), optax.sgd(learning_rate))
  sgd = optax.inject_hyperparams(sgd_with_clipping, static_args=("grad_clip",))(
      learning_rate=train_config.learning_rate, grad_clip=train_config.grad_clip)
  factor = train_config.get("head_lr_factor", ADDED_FIELDS["head_lr_factor"])
  if factor == 1.0:
    return sgd

  def update(grads, opt_state, params=None):
    updates, opt_state = sgd.update(grads, opt_state, params)
    head = jax.tree.map(lambda u: factor * u, updates[models.HEAD])
    return {**updates, models.HEAD: head}, opt_state
  return optax.GradientTransformation(sgd.init, update)


def shard_gradients(params: dict, batch: dict, rng: jax.Array, step: jax.Array,
                    first_row: jax.Array, carry: Optional[models.DecodeState], *,
                    model_config: ml_collections.ConfigDict):
  """Forward and backward pass of one batch shard on its device (jitted, not pmapped).

  Args:
    params, rng, step: the device's entries [1, ...] of the stacked parameters, dropout rng
      and step number (`parallel.device_views`).
    batch: the shard's rows, {"inputs", "targets", "lengths"[, "tags"]}.
    first_row: the global batch index of the shard's first row (seeds its dropout masks).
    carry: the rows' state from the previous window (stream protocol), else None.

  Returns:
    ((gradients of the shard's summed NLL / its rows, batch-norm updates,
      {"nll", "tokens"} of the shard), each leaf with a leading axis of 1), the rows' state
    after the window (None outside the stream protocol).
  """
  params, rng, step = jax.tree.map(lambda x: x[0], (params, rng, step))
  num_rows = batch["lengths"].shape[0]
  rows = first_row + jnp.arange(num_rows)
  rng = jax.random.fold_in(rng, step)
  weights = models.trainable(params)

  def loss_fn(weights):
    full = {**params, **weights}
    kwargs = dict(train=True, rng=rng, tags=batch.get("tags"), rows=rows)
    if carry is None:
      logits, updates = models.apply(full, model_config, batch["inputs"], batch["lengths"],
                                     mutable=True, **kwargs)
      new_carry = None
    else:
      logits, new_carry, updates = models.apply_window(full, model_config, batch["inputs"],
                                                       batch["lengths"], carry, **kwargs)
    return losses.loss(logits, batch["targets"], batch["lengths"]), (updates, new_carry)

  (loss, (updates, new_carry)), grads = jax.value_and_grad(loss_fn, has_aux=True)(weights)
  metrics = {"nll": loss * num_rows, "tokens": jnp.sum(batch["lengths"])}
  return jax.tree.map(lambda x: x[None], (grads, updates, metrics)), new_carry


def pairwise_sum(xs: jax.Array) -> jax.Array:
  """xs[0] + xs[1] + ... as a balanced tree of adjacent pairs, ((x0 + x1) + (x2 + x3)): the
  order in which shards summed per device and then across devices (`pmean`) add up."""
  while xs.shape[0] > 1:
    pairs = xs.shape[0] // 2
    xs = jnp.concatenate([xs[0:2 * pairs:2] + xs[1:2 * pairs:2], xs[2 * pairs:]])
  return xs[0]


class TrainState(NamedTuple):
  """The training state on the devices, stacked [devices, ...] (`parallel.replicate`).

  totals: running sums of the training metrics since the loop last reset them
    ({"nll", "tokens", "nonfinite": steps whose loss was not finite}).
  step: the number of the next step.
  """
  params: dict
  opt_state: Any
  totals: dict
  step: jax.Array


def zero_totals() -> dict:
  """The running sums of `TrainState.totals` at the start of a log interval."""
  return {"nll": np.float32(0), "tokens": np.int32(0), "nonfinite": np.int32(0)}


def apply_gradients(state: TrainState, learning_rate: jax.Array, shard_results: tuple, *,
                    optimizer: optax.GradientTransformation) -> TrainState:
  """The update of one step from the device's shards' `shard_gradients` (under pmap).

  The mean over the shards (summed pairwise) and then over the devices (`pmean`) is the
  gradient of the global batch's summed NLL / global batch size: the papers' loss.
  """
  shards = len(shard_results)
  over_shards = lambda *leaves: pairwise_sum(jnp.stack(leaves))
  grads, updates, metrics = (jax.tree.map(over_shards, *trees) for trees in zip(*shard_results))
  grads, updates = jax.tree.map(lambda x: x / shards, (grads, updates))
  grads = jax.lax.pmean(grads, AXIS)
  weights = models.trainable(state.params)
  opt_state = state.opt_state
  opt_state.hyperparams["learning_rate"] = learning_rate
  steps, opt_state = optimizer.update(grads, opt_state, weights)
  params = {**state.params, **optax.apply_updates(weights, steps),
            **jax.lax.pmean(updates, AXIS)}
  metrics = jax.lax.psum(metrics, AXIS)
  totals = {"nll": state.totals["nll"] + metrics["nll"],
            "tokens": state.totals["tokens"] + metrics["tokens"],
            "nonfinite": state.totals["nonfinite"] + ~jnp.isfinite(metrics["nll"])}
  return TrainState(params, opt_state, totals, state.step + 1)


def compile_side_by_side(compilations: Sequence[Callable[[], Any]]) -> None:
  """Runs `compilations` (`TrainStep.compilations`, `Evaluator.compilations`: each compiles
  one program, or runs the evaluation step once per shape) on a pool of threads, one per
  host CPU the process may use."""
  workers = max(1, min(len(compilations), provenance.host_cpus()))
  with concurrent.futures.ThreadPoolExecutor(workers) as pool:
    for future in [pool.submit(compile_one) for compile_one in compilations]:
      future.result()


def _compile(program, *args) -> None:
  """Compiles jitted or pmapped `program` for `args` (arrays, or their shapes and
  shardings); the compiled program is kept where a call with arrays like `args`, laid out
  alike, finds it."""
  program.lower(*args).compile()


def _run_in_order(program, params: dict, batches: Sequence[dict]) -> None:
  """Runs pmapped `program` on stacked `params` and each `shard_batch`ed host batch in turn,
  which compiles it for each batch's shapes."""
  for batch in batches:
    jax.block_until_ready(program(params, parallel.put_sharded(batch)))


def _batch_spec(batch: dict, sharding, rows: Optional[int] = None,
                width: Optional[int] = None) -> dict:
  """The shapes of `batch`'s arrays laid out by `sharding`; with `rows` and `width`, those of
  a batch of `rows` rows and `width` positions ([rows, width, ...] arrays; [rows, ...] for
  the others)."""
  def shape(value):
    if rows is None:
      return value.shape
    return (rows, width, *value.shape[2:]) if value.ndim >= 2 else (rows, *value.shape[1:])
  return {key: jax.ShapeDtypeStruct(shape(value), value.dtype, sharding=sharding)
          for key, value in batch.items()}


@functools.lru_cache(maxsize=None)
def _jitted_gradients(model_config: ml_collections.FrozenConfigDict):
  """`shard_gradients` jitted for a model config, one per config in a process: a new
  `TrainStep` of the same model (a resumed run, the next row, a notebook cell run again)
  reuses the programs already compiled for each batch width."""
  return jax.jit(functools.partial(shard_gradients, model_config=model_config))


class TrainStep:
  """One data-parallel SGD step: `shard_gradients` of every shard on its device, then the
  pmapped `apply_gradients`."""

  def __init__(self, config: ml_collections.ConfigDict, devices: Optional[list] = None):
    """Compiles (lazily) the step for `config`.

    Args:
      config: the run's config (model, data.batch_size, train.grad_shards, train.grad_clip).
      devices: the local devices to use (default: all; a subset only in a single process).
    """
    self.devices = devices or jax.local_devices()
    total = len(self.devices) * jax.process_count()
    self.shards = max(1, config.train.grad_shards // total)
    self.shard_rows = config.data.batch_size // (total * self.shards)
    self.optimizer = make_optimizer(config.train)
    self._gradients = _jitted_gradients(ml_collections.FrozenConfigDict(config.model))
    self._apply = jax.pmap(functools.partial(apply_gradients, optimizer=self.optimizer),
                           axis_name=AXIS, donate_argnums=(0,), devices=devices)

  def initial_state(self, params: dict, opt_state: Any, step: int) -> TrainState:
    """The stacked state from host parameters, optimizer state and step number."""
    return TrainState(*parallel.replicate(
        (params, opt_state, zero_totals(), np.int32(step + 1)), self.devices))

  def place(self, batch: dict) -> list:
    """This process's rows of a global batch cut into the shards of each local device and
    sent there (asynchronously): [device][shard] -> batch dict."""
    return [[jax.device_put({key: value[rows] for key, value in batch.items()}, device)
             for rows in self._shard_rows(index)]
            for index, device in enumerate(self.devices)]

  def compilations(self, state: TrainState, rng: jax.Array, batch: dict,
                   widths: Sequence[int]) -> list[Callable[[], Any]]:
    """One compilation (for `compile_side_by_side`) of each shard's program on each device
    for each batch width in `widths`, for batches like `batch` (this process's rows of a
    global batch) and a stacked `state` and `rng`. Not for the stream protocol, whose one
    width compiles at the first step."""
    jobs = []
    for index, device in enumerate(self.devices):
      params, step_rng, step = parallel.device_views((state.params, rng, state.step), index)
      sharding = jax.sharding.SingleDeviceSharding(device)
      for width in widths:
        spec = _batch_spec(batch, sharding, self.shard_rows, width)
        jobs.append(functools.partial(_compile, self._gradients, params, spec, step_rng, step,
                                      np.int32(0), None))
    return jobs

  def _shard_rows(self, device_index: int) -> list[slice]:
    """The rows of each shard of local device `device_index` within this process's rows."""
    first = device_index * self.shards * self.shard_rows
    return [slice(first + s * self.shard_rows, first + (s + 1) * self.shard_rows)
            for s in range(self.shards)]

  def __call__(self, state: TrainState, placed: list, rng: jax.Array, learning_rate: jax.Array,
               carries: Optional[list] = None) -> tuple[TrainState, Optional[list]]:
    """One step on a `place`d batch; `rng` and `learning_rate` stacked; `carries` the rows'
    states [device][shard] (stream protocol). Returns the new state and carries."""
    results, new_carries = [], []
    for index, shards in enumerate(placed):
      params, step_rng, step = parallel.device_views((state.params, rng, state.step), index)
      device_results = []
      for s, batch in enumerate(shards):
        first_row = (parallel.global_index(index) * self.shards + s) * self.shard_rows
        carry = carries[index][s] if carries is not None else None
        result, carry = self._gradients(params, batch, step_rng, step, np.int32(first_row),
                                        carry)
        device_results.append(result)
        new_carries.append(carry)
      results.append(tuple(device_results))
    stacked = tuple(parallel.stack_views([device[s] for device in results], self.devices)
                    for s in range(self.shards))
    state = self._apply(state, learning_rate, stacked)
    if carries is None:
      return state, None
    return state, [new_carries[i * self.shards:(i + 1) * self.shards]
                   for i in range(len(self.devices))]

  def carries_from_host(self, carry: models.DecodeState) -> list:
    """The carried states of this process's rows, [device][shard], from the host state of
    the whole global batch (`carries_to_host`)."""
    first = jax.process_index() * len(self.devices) * self.shards * self.shard_rows
    return [[jax.device_put(_rows(carry, slice(first + rows.start, first + rows.stop)), device)
             for rows in self._shard_rows(index)]
            for index, device in enumerate(self.devices)]

  def carries_to_host(self, carries: list) -> models.DecodeState:
    """The carried states of the whole global batch as host arrays, in global row order
    (gathered from every process)."""
    pieces = [jax.device_get(carry) for device in carries for carry in device]
    local = jax.tree.map(lambda *xs: xs[0] if xs[0].ndim == 0 else np.concatenate(xs),
                         *pieces)
    if jax.process_count() == 1:
      return local
    return jax.tree.map(lambda x: x if x.ndim == 0 else np.asarray(
        multihost_utils.process_allgather(x, tiled=True)), local)


def _rows(tree, rows: slice):
  """The rows of every batch-major leaf of a state (scalars, e.g. buffer counters, as is)."""
  return jax.tree.map(lambda x: x if np.ndim(x) == 0 else x[rows], tree)


def initial_carry(params: dict, model_config, batch_size: int) -> models.DecodeState:
  """The host state of `batch_size` stream rows before the first window."""
  return jax.device_get(models.init_stream_state(params, model_config, batch_size))


def initial_state(config: ml_collections.ConfigDict, params: dict) -> dict:
  """The checkpointed training state before the first step (host arrays); under the stream
  protocol with the state every training row carries ("carry")."""
  opt_state = make_optimizer(config.train).init(models.trainable(params))
  _, dropout_rng = jax.random.split(jax.random.PRNGKey(config.seed))
  state = {"params": params, "opt_state": opt_state, "rng": dropout_rng,
           "step": np.zeros((), np.int64)}
  if config.data.span == "stream":
    state["carry"] = initial_carry(params, config.model, config.data.batch_size)
  return state


def eval_step(params: dict, batch: dict, *, model_config: ml_collections.ConfigDict) -> dict:
  """Summed `losses.nll_sums` of the global batch (run under pmap, axis "batch")."""
  logits = models.apply(params, model_config, batch["inputs"], batch["lengths"],
                        tags=batch.get("tags"))
  sums = losses.nll_sums(logits, batch["inputs"], batch["targets"], batch["lengths"])
  return jax.lax.psum(sums, AXIS)


def eval_window_step(params: dict, batch: dict, carry: models.DecodeState, *,
                     model_config: ml_collections.ConfigDict):
  """`eval_step` of one stream window, from and to the rows' carried state (under pmap)."""
  logits, carry, _ = models.apply_window(params, model_config, batch["inputs"],
                                         batch["lengths"], carry, tags=batch.get("tags"))
  sums = losses.nll_sums(logits, batch["inputs"], batch["targets"], batch["lengths"])
  return jax.lax.psum(sums, AXIS), carry


class Evaluator:
  """Both perplexities of a split, with the evaluation steps pmapped over the local devices."""

  def __init__(self, model_config: ml_collections.ConfigDict):
    self._model_config = model_config
    self._step = jax.pmap(functools.partial(eval_step, model_config=model_config),
                          axis_name=AXIS)
    self._window_step = jax.pmap(functools.partial(eval_window_step,
                                                   model_config=model_config),
                                 axis_name=AXIS)

  def compilations(self, params: dict, data, splits: Sequence[str],
                   batch_size: int) -> list[Callable[[], Any]]:
    """The compilations (for `compile_side_by_side`) of the evaluation step for each batch
    shape of `splits` of `data` in batches of `batch_size`, with stacked `params`: one each,
    ahead of time, in a single process; with several processes, whose pmapped step lowers
    for the global batch that no process holds, one that runs the step once on a batch of
    each shape, in the same order in every process (the runs' collectives must meet). Not for
    the stream protocol, whose windows have one shape."""
    shard = (jax.process_index(), jax.process_count())
    batches = {}
    for split in splits:
      for batch in data.eval_batches(split, batch_size, *shard):
        batch = parallel.shard_batch(batch, EVAL_TIME_MULTIPLE)
        batches.setdefault(tuple(sorted((key, value.shape) for key, value in batch.items())),
                           batch)
    if jax.process_count() > 1:
      return [functools.partial(_run_in_order, self._step, params, list(batches.values()))]
    sharding = parallel.stacked_sharding(jax.local_devices())
    specs = [_batch_spec(batch, sharding) for batch in batches.values()]
    # A pmapped function makes its program cache at its first use: made here, on the calling
    # thread (one lowering, which the compilation of that shape reuses), so that compilations
    # on other threads all fill that one. Two threads making it at once would each fill their
    # own, and the step would compile again at its first call.
    if specs:
      self._step.lower(params, specs[0])
    return [functools.partial(_compile, self._step, params, spec) for spec in specs]

  def __call__(self, params: dict, data, split: str, batch_size: int) -> dict:
    """Evaluates stacked `params` on `split` of `data` (an `LMData`) in batches of
    `batch_size` rows (this process's rows of each).

    Every token is predicted once: sentences are never truncated; under the stream protocol
    the windows carry the state of `batch_size` streams. The steps are all dispatched before
    the first sum is read, and the sums are added on the host in float64.

    Returns:
      {"perplexity", "perplexity_paper_convention", "nll", "tokens", "sentences"}.
    """
    shard = (jax.process_index(), jax.process_count())
    batches = data.eval_batches(split, batch_size, *shard)
    if data.is_stream:
      host = parallel.first_replica(params)
      rows = batch_size // jax.device_count()
      carry = parallel.replicate(initial_carry(host, self._model_config, rows))
      sums = []
      for batch, _ in parallel.prefetch(((parallel.shard_batch(b), None) for b in batches),
                                        parallel.put_sharded):
        batch_sums, carry = self._window_step(params, batch, carry)
        sums.append(batch_sums)
    else:
      sums = [self._step(params, batch) for batch, _ in parallel.prefetch(
          ((parallel.shard_batch(b, EVAL_TIME_MULTIPLE), None) for b in batches),
          parallel.put_sharded)]
    totals = dict.fromkeys(losses.SUM_KEYS, 0.0)
    for batch_sums in sums:
      for key in totals:
        totals[key] += float(parallel.first_replica(batch_sums[key]))
    return {**losses.perplexities(totals, data.released_count(split)), "nll": totals["nll"],
            "tokens": int(totals["tokens"]), "sentences": int(totals["sentences"])}
