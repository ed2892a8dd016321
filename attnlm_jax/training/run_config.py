"""A run's config made whole: the sizes its vocabulary and its POS tagger decide, then checked."""

import math
from typing import Mapping, Sequence, Type

import jax
import ml_collections

from attnlm_jax.common.errors import ConfigError
from attnlm_jax.common.errors import UserError
from attnlm_jax import models
from attnlm_jax.tagger import tagging
from attnlm_jax.training import schedules


def complete(config: ml_collections.ConfigDict, vocab_size: int) -> ml_collections.ConfigDict:
  """A copy of `config` with `model.vocab_size` set and, with POS-tag inputs, `model.num_tags`
  (the tag list of the tagger in `data.tagger_dir`); ConfigError for a model the code cannot
  run (`models.validate`)."""
  config = config.copy_and_resolve_references()
  config.model.vocab_size = vocab_size
  if config.model.get("pos_tags"):
    config.model.num_tags = tagging.num_tags(config.data)
  models.validate(config.model)
  return config


def check_evaluation(config: ml_collections.ConfigDict) -> None:
  """Raises ConfigError unless the evaluation batch splits over the devices (a run trained
  on other devices may be evaluated here)."""
  _check_split(config, "eval_batch_size")


def _check_split(config: ml_collections.ConfigDict, field: str) -> None:
  """ConfigError unless `config.data.field` (a global batch) splits over the devices."""
  devices = jax.device_count()
  if config.data[field] % devices:
    raise ConfigError(f"config.data.{field} = {config.data[field]} (the global batch) does "
                      f"not split over {devices} devices: use a multiple of {devices} "
                      f"(--config.data.{field})")


def check_seeds(config: ml_collections.ConfigDict) -> None:
  """Raises ConfigError for a negative `seed` or `data.seed` (where the config has one):
  numpy's random generators take none."""
  for name, seed in (("seed", config.seed), ("data.seed", config.data.get("seed", 0))):
    if seed < 0:
      raise ConfigError(f"config.{name} = {seed} must be at least 0 (--config.{name})")


def check_counts(config: ml_collections.ConfigDict, fields: Sequence[str],
                 error: Type[UserError] = ConfigError) -> None:
  """Raises `error` for a field of `fields` ("train.num_epochs", ...) below 1."""
  for field in fields:
    section, name = field.split(".")
    if config[section][name] < 1:
      raise error(f"config.{field} = {config[section][name]} must be at least 1")


def check_positive(config: ml_collections.ConfigDict, fields: Mapping[str, str],
                   error: Type[UserError] = ConfigError) -> None:
  """Raises `error` for a field of `fields` ({"train.learning_rate": what it is, ...}) that is
  not a positive finite number, saying what the field is."""
  for field, meaning in fields.items():
    section, name = field.split(".")
    if not 0 < config[section][name] < math.inf:
      raise error(f"config.{field} = {config[section][name]} must be a positive number"
                  f"{': ' + meaning if meaning else ''}")


# Training's fields that count steps or epochs, and its positive numbers -> what they are.
TRAINING_COUNTS = ("train.num_epochs", "train.patience", "train.log_every_steps",
                   "train.lr_plateau_patience")
TRAINING_POSITIVE = {"train.learning_rate": "",
                     "train.grad_clip": "the largest global norm of a step's gradient (the "
                                        "papers' 5.0)"}


def check_training(config: ml_collections.ConfigDict) -> None:
  """Raises ConfigError for training settings that cannot work (one line each)."""
  check_seeds(config)
  devices = jax.device_count()
  for field in ("batch_size", "eval_batch_size"):
    _check_split(config, field)
  shards = config.train.grad_shards
  if shards and (shards % devices or config.data.batch_size % shards):
    raise ConfigError(f"config.train.grad_shards = {shards} must be a multiple of the "
                      f"{devices} devices and divide config.data.batch_size = "
                      f"{config.data.batch_size} (0: one shard per device)")
  check_counts(config, TRAINING_COUNTS)
  check_positive(config, TRAINING_POSITIVE)
  if config.train.lr_schedule not in schedules.SCHEDULES:
    raise ConfigError(f"config.train.lr_schedule = {config.train.lr_schedule!r} is not a "
                      f"schedule: use one of {', '.join(schedules.SCHEDULES)}")
  if not 0.0 <= config.train.lr_plateau_improvement < 1.0:
    raise ConfigError("config.train.lr_plateau_improvement = "
                      f"{config.train.lr_plateau_improvement} must be a fraction in [0, 1)")
  if config.train.min_learning_rate < 0:
    raise ConfigError(f"config.train.min_learning_rate = {config.train.min_learning_rate} "
                      "must be at least 0 (0: no floor)")
  if config.train.lr_decay_divisor <= 0:
    raise ConfigError(f"config.train.lr_decay_divisor = {config.train.lr_decay_divisor} must be "
                      "positive: the learning rate is divided by it (2.0 halves it)")
  first = schedules.epoch_learning_rate(config.train, 1, schedules.PlateauDecay(0.0))
  if config.train.min_learning_rate > first:
    raise ConfigError(f"config.train.min_learning_rate = {config.train.min_learning_rate} is "
                      f"above the first epoch's learning rate {first:g}, so no epoch would "
                      "train: lower it (0: no floor)")
  factor = config.train.head_lr_factor
  if factor <= 0:
    raise ConfigError(f"config.train.head_lr_factor = {factor} must be positive")
  if factor != 1.0 and not models.has_output_layer(config.model):
    raise ConfigError(f"config.train.head_lr_factor = {factor} scales the learning rate of "
                      "the output layer h'_t, which config.model.score="
                      f"{config.model.score!r} does not have: leave it at 1.0")
  if models.uses_batch_statistics(config.model) and config.data.bucket:
    raise ConfigError(f"config.model.score={config.model.score!r} normalises each step by "
                      "its batch's statistics, and config.data.bucket=True batches sentences "
                      "of nearly equal length, so a row could read from the others when its "
                      "own sentence ends (docs/models.md): set --config.data.bucket=false")
