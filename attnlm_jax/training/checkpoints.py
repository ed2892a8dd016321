"""Checkpoints of a training run (Orbax) and the files saved beside them: the latest two (to
resume from) and the best by validation perplexity (to roll back to); an unreadable latest one
is set aside in `unreadable_checkpoints/` and the run resumes from the one before
(docs/training.md, "What goes in the workdir")."""

import json
from typing import Any, Mapping, Optional

from absl import logging
from etils import epath
import jax
from jax.experimental import multihost_utils
import ml_collections
import orbax.checkpoint as ocp
from orbax.checkpoint import checkpoint_managers

from attnlm_jax.common import errors
from attnlm_jax.common import json_io
from attnlm_jax.common import logging_utils
from attnlm_jax.data import locations
from attnlm_jax.data import pipeline
from attnlm_jax.data import vocab as vocab_lib
from attnlm_jax import models
from attnlm_jax.tagger import tagging
from attnlm_jax.training import steps

CONFIG_FILE = "config.json"
VOCAB_FILE = "vocab.json"
# The fingerprint of the POS tagger whose tags a POS-input model trained on (`tagging`).
TAGGER_FINGERPRINT_FILE = "tagger_fingerprint.txt"
CHECKPOINT_DIR = "checkpoints"
UNREADABLE_DIR = "unreadable_checkpoints"
METRIC = "valid_perplexity"
# Latest checkpoints kept: a resume falls back to an older one when the newest is unreadable.
KEEP_LATEST = 2


# Config keys that may differ between a run's config and its saved config.json: where the
# files are, and how often the run logs and saves.
IGNORED_KEYS = ("data.data_dir", "data.cache_dir", "data.tagger_dir", "train.log_every_steps",
                "train.save_every_steps")
# Sizes a config file leaves at 0 for training to take from the data and the tagger.
FILLED_KEYS = ("model.vocab_size", "model.num_tags")
# What a rerun of a training run may change besides: how long it trains, and the learning
# rate a diverged run resumes with (docs/training.md).
RESUMABLE_KEYS = ("train.num_epochs", "train.learning_rate")
# Model fields that choose only how a trained network is computed, initialised or trained:
# an evaluation may set them otherwise than the run did (docs/training.md).
EVALUATION_FREE_KEYS = ("model.attention_form", "model.compute_dtype", "model.unroll",
                        "model.streaming_min_len", "model.score_block_elements",
                        "model.max_len", "model.dropout", "model.dropout_site",
                        "model.init_scale", "model.forget_bias", "model.head_bias_init")
_ABSENT = "absent"  # How a config key missing on one side shows in a difference.


class CheckpointError(errors.UserError):
  """A workdir that cannot be used: no checkpoint, or one made for another config."""


class Checkpoints:
  """The Orbax manager of `workdir/checkpoints`: latest + best by validation perplexity."""

  def __init__(self, workdir: epath.Path, save_every_steps: int = 0, read_only: bool = False):
    """Opens (or, unless read_only, creates) the checkpoint directory.

    Args:
      workdir: the run's directory.
      save_every_steps: interval of step checkpoints (0: only at epoch ends).
      read_only: open for restoring only.
    """
    logging_utils.quiet_libraries()
    self._save_every_steps = save_every_steps
    options = ocp.CheckpointManagerOptions(
        preservation_policy=checkpoint_managers.AnyPreservationPolicy([
            checkpoint_managers.LatestN(KEEP_LATEST),
            checkpoint_managers.BestN(get_metric_fn=lambda m: m[METRIC], reverse=True, n=1,
                                      keep_checkpoints_without_metrics=False)]),
        best_fn=lambda m: m[METRIC], best_mode="min",
        cleanup_tmp_directories=not read_only, read_only=read_only, create=not read_only)
    workdir = locations.absolute(str(workdir))   # Orbax needs a local path to be absolute.
    self.directory = epath.Path(workdir) / CHECKPOINT_DIR
    self._unreadable_directory = epath.Path(workdir) / UNREADABLE_DIR
    self._manager = ocp.CheckpointManager(
        self.directory, options=options,
        item_handlers={"state": ocp.StandardCheckpointHandler(),
                       "meta": ocp.JsonCheckpointHandler()})

  def latest_step(self) -> Optional[int]:
    """The step of the latest checkpoint, or None."""
    return self._manager.latest_step()

  def best_step(self) -> Optional[int]:
    """The step of the epoch-end checkpoint with the lowest validation perplexity, or None."""
    return self._manager.best_step()

  def valid_perplexity(self, step: int) -> Optional[float]:
    """The validation perplexity saved with an epoch-end checkpoint (None for a step one)."""
    metrics = self._manager.metrics(step)
    return metrics[METRIC] if metrics else None

  def should_save(self, step: int) -> bool:
    """True when `step` is a multiple of `save_every_steps` (> 0)."""
    return self._save_every_steps > 0 and step % self._save_every_steps == 0

  def save(self, step: int, state: Any, meta: dict,
           valid_perplexity: Optional[float] = None) -> None:
    """Saves (asynchronously) `state` (a pytree) and `meta` (JSON) as checkpoint `step`.

    Args:
      step: the number of training steps taken.
      state: {"params", "opt_state", "rng", "step"} and, under the stream protocol, "carry"
        (host or single-device arrays).
      meta: epoch, iterator position, training time, early stopping (JSON-serialisable).
      valid_perplexity: given at epoch ends; makes the checkpoint a candidate for "best".
    """
    metrics = None if valid_perplexity is None else {METRIC: float(valid_perplexity)}
    self._manager.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(state),
                                                     meta=ocp.args.JsonSave(meta)),
                       metrics=metrics, force=True)

  def all_steps(self) -> list[int]:
    """The steps of every checkpoint in the directory, oldest first."""
    return sorted(self._manager.all_steps())

  def restore(self, step: int, target: Any) -> tuple[Any, dict]:
    """(state, meta) of checkpoint `step`; `target` gives the tree and shapes (abstract).

    Raises:
      CheckpointError: the checkpoint cannot be read (one line naming it and the cause).
    """
    try:
      restored = self._manager.restore(step, args=ocp.args.Composite(
          state=ocp.args.StandardRestore(target), meta=ocp.args.JsonRestore()))
      if restored["meta"] is None or restored["state"] is None:
        raise ValueError("part of it is missing")
    except Exception as e:  # Orbax and tensorstore raise many kinds; all mean "unreadable".
      raise CheckpointError(f"checkpoint {step} in {self.directory} cannot be read "
                            f"({_first_line(e)})") from e
    return restored["state"], restored["meta"]

  def restore_evaluated(self, step: int, target: Any) -> tuple[Any, dict]:
    """`restore` of the checkpoint a run is evaluated with (its best epoch's), which no other
    checkpoint can stand in for unasked: when it cannot be read, the error says how to go on.
    """
    try:
      return self.restore(step, target)
    except CheckpointError as e:
      raise CheckpointError(
          f"{e}: it holds the parameters the run is evaluated with; restore it from a copy of "
          f"the run, or move {self.directory / str(step)} aside to use the best readable "
          "checkpoint instead") from e

  def restore_latest(self, target: Any) -> Optional[tuple[Any, dict]]:
    """(state, meta) of the newest readable checkpoint, None when there is none at all.

    An unreadable newer checkpoint is reported in one warning line and moved to
    `unreadable_checkpoints/<step>`, so that the resumed run can save that step again.

    Raises:
      CheckpointError: checkpoints exist but none can be read (nothing is moved).
    """
    failures = []
    for step in reversed(self.all_steps()):
      try:
        restored = self.restore(step, target)
      except CheckpointError as e:
        logging.warning("%s: trying the one before", e)
        failures.append((step, str(e)))
        continue
      for unreadable_step, _ in failures:
        self._set_aside(unreadable_step)
      return restored
    if failures:
      raise CheckpointError(f"no checkpoint in {self.directory} can be read "
                            f"({'; '.join(message for _, message in failures)}): delete "
                            "that directory to start over, or use a new --workdir")
    return None

  def _set_aside(self, step: int) -> None:
    """Moves checkpoint `step` to `unreadable_checkpoints/<step>[.N]` and forgets it: process 0
    moves it, every process waits for the move, then forgets it."""
    if jax.process_index() == 0:
      self._unreadable_directory.mkdir(parents=True, exist_ok=True)
      destination = self._unreadable_directory / str(step)
      copies = 1
      while destination.exists():
        destination = self._unreadable_directory / f"{step}.{copies}"
        copies += 1
      (self.directory / str(step)).rename(destination)
      logging.warning("moved unreadable checkpoint %d to %s", step, destination)
    if jax.process_count() > 1:
      multihost_utils.sync_global_devices(f"checkpoint {step} set aside")
    self._manager.reload()

  def param_shapes(self, step: int) -> dict[str, tuple[int, ...]]:
    """{"embed": (V, H), "lstm/0/...": ...} of the parameters saved at `step`.

    Raises:
      CheckpointError: the checkpoint's metadata cannot be read.
    """
    try:
      tree = self._manager.item_metadata(step)["state"].tree
      return _shapes(tree["params"])
    except Exception as e:  # As in `restore`: any failure means unreadable.
      raise CheckpointError(f"checkpoint {step} in {self.directory} cannot be read "
                            f"({_first_line(e)})") from e

  def wait(self) -> None:
    """Blocks until pending saves are written."""
    self._manager.wait_until_finished()

  def close(self) -> None:
    """Waits for pending saves and releases the manager."""
    self._manager.close()


def _first_line(error: Exception) -> str:
  """`Type: first line of the message` of an exception, for one-line reports."""
  lines = str(error).strip().splitlines()
  return f"{type(error).__name__}: {lines[0] if lines else ''}".rstrip(": ")


def _shapes(tree) -> dict[str, tuple[int, ...]]:
  """Flattens a tree of arrays (or Orbax metadata) to {"a/0/b": shape}."""
  def name(path) -> str:
    return "/".join(str(getattr(k, "key", getattr(k, "idx", k))) for k in path)
  leaves, _ = jax.tree_util.tree_flatten_with_path(tree)
  return {name(path): tuple(leaf.shape) for path, leaf in leaves}


def evaluated_step(workdir: epath.Path) -> Optional[int]:
  """The step evaluation restores (`evaluate.load`): the best checkpoint's, else the latest's;
  None when the workdir has no checkpoint."""
  if not (workdir / CHECKPOINT_DIR).exists():
    return None
  checkpoints = Checkpoints(workdir, read_only=True)
  step = checkpoints.best_step()
  step = checkpoints.latest_step() if step is None else step
  checkpoints.close()
  return step


def has_weights(workdir: epath.Path) -> bool:
  """Whether a run's directory holds what `evaluate.load` restores: its vocabulary and a
  checkpoint (a run's log copied without them, as `docs/results/` keeps it, does not)."""
  return (workdir / VOCAB_FILE).exists() and evaluated_step(workdir) is not None


def check_compatible(workdir: epath.Path, vocab: vocab_lib.Vocabulary, params: Any) -> None:
  """Raises CheckpointError when the workdir was made with another vocabulary or shapes.

  Args:
    workdir: the run's directory (may be new or empty: then nothing is checked).
    vocab: the vocabulary of the current data.
    params: the parameters (or their `jax.eval_shape`) the current config builds.
  """
  vocab_path = workdir / VOCAB_FILE
  if vocab_path.exists():
    saved = vocab_lib.Vocabulary.load(vocab_path)
    if saved.fingerprint() != vocab.fingerprint():
      raise CheckpointError(
          f"{vocab_path} holds another vocabulary ({len(saved)} words, fingerprint "
          f"{saved.fingerprint()}) than this config's data ({len(vocab)} words, "
          f"{vocab.fingerprint()}): use a new --workdir or the data it was trained on")
  if not (workdir / CHECKPOINT_DIR).exists():
    return
  checkpoints = Checkpoints(workdir, read_only=True)
  saved_shapes = None
  for step in reversed(checkpoints.all_steps()):
    try:
      saved_shapes = checkpoints.param_shapes(step)
      break
    except CheckpointError:
      continue  # Reported by whoever restores it; the previous one may be readable.
  if saved_shapes is None:
    return
  shapes = _shapes(params)
  for name in sorted(saved_shapes.keys() | shapes.keys()):
    if saved_shapes.get(name) != shapes.get(name):
      raise CheckpointError(
          f"the checkpoint in {checkpoints.directory} does not fit the config: parameter "
          f"{name} has shape {saved_shapes.get(name)} there but {shapes.get(name)} in the "
          "config: use a new --workdir or the config it was trained with "
          f"({workdir / CONFIG_FILE})")


def write_config_and_vocab(workdir: epath.Path, config: ml_collections.ConfigDict,
                           vocab: vocab_lib.Vocabulary) -> None:
  """Writes config.json and vocab.json beside the checkpoints unless they exist, and for a
  POS-input model the fingerprint of its tagger (TAGGER_FINGERPRINT_FILE)."""
  workdir.mkdir(parents=True, exist_ok=True)
  if not (workdir / CONFIG_FILE).exists():
    (workdir / CONFIG_FILE).write_text(config.to_json_best_effort(indent=2, sort_keys=True))
  if not (workdir / VOCAB_FILE).exists():
    vocab.save(workdir / VOCAB_FILE)
  fingerprint_file = workdir / TAGGER_FINGERPRINT_FILE
  if config.model.get("pos_tags") and not fingerprint_file.exists():
    fingerprint_file.write_text(tagging.fingerprint(config.data.tagger_dir) + "\n")


def check_tagger(workdir: epath.Path, data_config: ml_collections.ConfigDict) -> None:
  """CheckpointError when a POS-input model's workdir names another tagger
  (TAGGER_FINGERPRINT_FILE) than the one in `data_config.tagger_dir`: its tags, and so the
  model's inputs, would differ."""
  path = workdir / TAGGER_FINGERPRINT_FILE
  if not path.exists():
    return
  saved, current = path.read_text().strip(), tagging.fingerprint(data_config.tagger_dir)
  if saved != current:
    raise CheckpointError(
        f"the tagger in {data_config.tagger_dir} (fingerprint {current}) is not the one this "
        f"model trained with ({saved}, {path}): its tags would differ; pass "
        "--config.data.tagger_dir=DIR of that tagger, or train the model again")


def _flatten(tree: Mapping, prefix: str = "") -> dict:
  """{"model.score": ...} of a nested JSON dict."""
  flat = {}
  for key, value in tree.items():
    if isinstance(value, Mapping):
      flat.update(_flatten(value, f"{prefix}{key}."))
    else:
      flat[f"{prefix}{key}"] = value
  return flat


def as_json(config: ml_collections.ConfigDict) -> dict:
  """A ConfigDict as plain JSON values (tuples become lists, references resolved)."""
  return json.loads(config.to_json_best_effort())


def config_differences(expected: Mapping, saved: Mapping,
                       ignored: tuple[str, ...] = ()) -> dict[str, tuple[Any, Any]]:
  """The dotted keys whose values differ between a config and a saved one (both as JSON
  dicts).

  Paths and logging/saving cadence (IGNORED_KEYS) are left out, and so are `ignored` and the
  sizes training fills in (FILLED_KEYS) when `expected` leaves them to it (0).

  Returns:
    {key: (saved value, expected value)}, "absent" for a key one of them lacks.
  """
  want, have = _flatten(expected), _flatten(saved)
  ignored = {*IGNORED_KEYS, *ignored, *(key for key in FILLED_KEYS if not want.get(key))}
  pairs = {key: (have.get(key, _ABSENT), want.get(key, _ABSENT))
           for key in sorted(want.keys() | have.keys()) if key not in ignored}
  return {key: pair for key, pair in pairs.items() if pair[0] != pair[1]}


def check_config(workdir: epath.Path, config: ml_collections.ConfigDict) -> None:
  """Raises CheckpointError when the workdir holds a run of another config (config.json):
  resuming it would go on under other settings than its log and checkpoints record. Paths,
  logging/saving cadence (IGNORED_KEYS), the epochs and the learning rate (RESUMABLE_KEYS)
  may differ."""
  if not (workdir / CONFIG_FILE).exists():
    return
  differences = config_differences(as_json(config), as_json(read_config(workdir)),
                                   RESUMABLE_KEYS)
  if differences:
    raise CheckpointError(
        f"{workdir} holds a run of another config ({_listed(differences)}): rerun with the "
        f"config it was trained with ({workdir / CONFIG_FILE}) or use a new --workdir")


def check_evaluation_config(workdir: epath.Path, config: ml_collections.ConfigDict) -> None:
  """Raises CheckpointError when `config` would evaluate the run's weights as another network
  than they were trained as: a model field, `data.start_symbol` (what a sentence starts
  from) or `data.span` (whether the checkpoint holds the stream protocol's carried state,
  `steps.initial_state`) other than in its config.json, those of EVALUATION_FREE_KEYS
  excepted."""
  if not (workdir / CONFIG_FILE).exists():
    return
  differences = {key: values for key, values in config_differences(
      as_json(config), as_json(read_config(workdir)), EVALUATION_FREE_KEYS).items()
                 if key.startswith("model.") or key in ("data.start_symbol", "data.span")}
  if differences:
    raise CheckpointError(
        f"{workdir} was trained as another network ({_listed(differences)}): evaluate it "
        f"without --config (it reads {workdir / CONFIG_FILE}) or with those fields as there")


def _listed(differences: Mapping[str, tuple[Any, Any]]) -> str:
  """`config_differences` as "KEY is SAVED there, GIVEN here; ..."."""
  return "; ".join(f"{key} is {there} there, {here} here"
                   for key, (there, here) in differences.items())


def read_config(workdir: epath.Path) -> ml_collections.ConfigDict:
  """The config.json saved in a workdir, as a locked ConfigDict. Model, data and train fields
  added since the run was saved take their `models.default_config`, `pipeline.ADDED_FIELDS`
  and `steps.ADDED_FIELDS` values (a new field's default keeps the behaviour from before it
  existed)."""
  path = workdir / CONFIG_FILE
  if not path.exists():
    raise CheckpointError(f"{path} not found: pass --config=configs/NAME.py or the --workdir "
                          "of a training run")
  saved = json_io.read_json(path, CheckpointError, "restore it, or pass --config=configs/NAME.py "
                            "the run was trained with")
  model = models.default_config()
  model.update(saved.get("model", {}))
  data = {**pipeline.ADDED_FIELDS, **saved.get("data", {})}
  train = {**steps.ADDED_FIELDS, **saved.get("train", {})}
  config = ml_collections.ConfigDict({**saved, "model": model, "data": data, "train": train})
  config.lock()
  return config


def read_vocab(workdir: epath.Path) -> vocab_lib.Vocabulary:
  """The vocab.json saved in a workdir."""
  path = workdir / VOCAB_FILE
  if not path.exists():
    raise CheckpointError(f"{path} not found: {workdir} is not the --workdir of a training "
                          "run")
  return vocab_lib.Vocabulary.load(path)

