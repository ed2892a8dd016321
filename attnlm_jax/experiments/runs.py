"""A training run read back from its `metrics.jsonl`: its curve, its final perplexities under
both rules, where and how long it trained; and its validation curves drawn."""

import math
import statistics
from typing import Any, Callable, Mapping, Optional, Sequence

from etils import epath

from attnlm_jax.common import errors
from attnlm_jax.common import figures
from attnlm_jax.common import json_io
from attnlm_jax.common import logging_utils

RUN_KEYS = ("valid_perplexity", "test_perplexity", "valid_perplexity_paper_convention",
            "test_perplexity_paper_convention")


class RunError(errors.UserError):
  """A workdir without a readable metrics file."""


def model_key(model_config) -> str:
  """The name a run's model has in `PaperResult.score` ("das_lstmn+tags" with POS tags)."""
  tags = "+tags" if model_config.get("pos_tags", False) else ""
  return model_config["score"] + tags


# The place of an epoch that trained partly in one place and partly in another.
TWO_PLACES = "split between two places"


def _seconds_by_epoch(records: Sequence[dict]) -> dict[int, tuple[Optional[str], float]]:
  """{epoch: (place, training seconds)} of each validated epoch whose seconds the log gives:
  the difference of its cumulative `train_seconds` and the epoch before's (the last record of
  each epoch, as in the curve), with the place (`ran_on`) it trained in; `TWO_PLACES` for an
  epoch split between two places (resumed mid-epoch elsewhere), whose time is neither's."""
  place, places, last_end_step, ends = None, set(), 0, {}
  for record in records:
    if record.get("event") == "start":
      place = ran_on(record)
      if record.get("step") == last_end_step:  # nothing of this epoch ran before the resume
        places = set()
      places.add(place)
    elif "valid_perplexity" in record:
      ends[record["epoch"]] = (place if len(places) == 1 else TWO_PLACES,
                               record.get("train_seconds"))
      places, last_end_step = {place}, record["step"]
  seconds = {}
  for epoch, (where, total) in sorted(ends.items()):
    before = 0.0 if epoch == 1 else ends.get(epoch - 1, (None, None))[1]
    if None not in (total, before):
      seconds[epoch] = (where, total - before)
  return seconds


def _epoch_seconds(seconds_by_epoch: Mapping[int, tuple[Optional[str], float]],
                   statistic: Callable[[list[float]], float]) -> dict[str, float]:
  """`statistic` (`statistics.median`, `min`) of the training seconds of a run's epochs in
  each place it trained, {`ran_on`: seconds} in the order first met (`_seconds_by_epoch`;
  epochs of an unknown place or split between two left out)."""
  seconds = {}
  for where, value in seconds_by_epoch.values():
    if where not in (None, TWO_PLACES):
      seconds.setdefault(where, []).append(value)
  return {where: statistic(values) for where, values in seconds.items()}


def ran_on(start: Mapping[str, Any]) -> Optional[str]:
  """Where a training session ran, from its start record: "cpu (Intel(R) Xeon(R) Processor),
  1 device, 2 host CPUs" with the CPU's model (without it for a log from before `cpu_model`
  was logged), or with an accelerator's name ("gpu (NVIDIA H100 80GB HBM3), 1 device, 16 host
  CPUs"); None for a record that does not say (from before `platform` and `host_cpus`)."""
  if "platform" not in start:
    return None
  plural = lambda n, word: f"{n} {word}{'' if n == 1 else 's'}"
  kind = (start.get("cpu_model") if start["platform"] == "cpu"
          else start.get("device_kind"))
  platform = (f"{start['platform']} ({kind})" if kind and kind != start["platform"]
              else start["platform"])
  return (f"{platform}, {plural(start['devices'], 'device')}, "
          f"{plural(start['host_cpus'], 'host CPU')}")


def read_run(workdir) -> dict:
  """The record of a run from its `metrics.jsonl`.

  Returns:
    {"name" (the workdir's last component), "workdir", "corpus", "score" (`model_key`),
     "hidden_size", "num_layers", "params", "finished" (a final evaluation was written),
     "best_epoch" (the final evaluation's; until finished, the epoch of the lowest
     validation perplexity so far, None before the first epoch), "untested_best_epoch" (the
     epoch of the lowest validation perplexity when the final evaluation tested another
     epoch's parameters, of a higher one: a run resumed where the best epoch's checkpoint
     was missing; else None), the final RUN_KEYS (None until finished), "num_epochs" (the
     config's most epochs) and "patience" (its early stopping's, each None when not
     recorded),
     "valid_curve": [[epoch, valid perplexity], ...] (the last record of each epoch: a
     resumed run may have validated one twice), "epochs_run" (epochs validated),
     "best_valid_perplexity" (the lowest of the curve, standard rule; None before the first
     epoch) and "last_epoch_seconds" (the training seconds of the last epoch validated: the
     difference of its cumulative `train_seconds` and the epoch before's; None before the
     first epoch, when the log does not record them or the epoch was split between two
     places), "ran_on" (where its sessions trained, `ran_on` of each start record that
     says, without repeats: [] for logs from before 2026-11-25), "epoch_seconds" (the
     median training seconds of an epoch in each of those places, `_epoch_seconds`) and
     "fastest_epoch_seconds" (the fewest: the cost of an epoch on a quiet machine, where the
     median also counts epochs slowed by compiling or by other work on the machine),
     "code_versions" (the code its sessions trained with, `code_version` of each start
     record that says, without repeats: [] for logs from before 2026-11-27) and "diverged"
     (the `diverged` event that ended its last session: {"step", "learning_rate", "reason"};
     None when that session did not diverge)}.
  """
  workdir = epath.Path(str(workdir))
  path = workdir / logging_utils.METRICS_FILE
  if not path.exists():
    raise RunError(f"{path} not found: {workdir} is not the --workdir of a training run")
  records = json_io.read_records(path, RunError, "restore the file from a copy of the run, or "
                                 "delete that line")
  starts = [r for r in records if r.get("event") == "start"]
  if not starts:
    raise RunError(f"{path} has no start record: pass the --workdir of a training run")
  diverged = None  # The last session's `diverged` event: a start record clears it.
  for record in records:
    if record.get("event") in ("start", "diverged"):
      diverged = record if record["event"] == "diverged" else None
  config = starts[-1]["config"]
  train = config.get("train", {})
  finals = [r for r in records if "final_test_perplexity" in r]
  final = finals[-1] if finals else {}
  epoch_records = {r["epoch"]: r for r in records if "valid_perplexity" in r}
  curve = sorted([epoch, r["valid_perplexity"]] for epoch, r in epoch_records.items())
  seconds_by_epoch = _seconds_by_epoch(records)
  last_epoch = seconds_by_epoch.get(curve[-1][0]) if curve else None
  # The first epoch of the lowest perplexity, as early stopping picks it (strictly lower).
  best = min(curve, key=lambda point: point[1], default=[None, None])
  tested = epoch_records.get(final.get("best_epoch"))
  untested = best[0] if tested and tested["valid_perplexity"] > best[1] else None
  return {"name": workdir.name, "workdir": str(workdir), "corpus": config["data"]["corpus"],
          "score": model_key(config["model"]), "hidden_size": config["model"]["hidden_size"],
          "num_layers": config["model"]["num_layers"], "params": starts[-1]["num_params"],
          "finished": bool(final), "best_epoch": final.get("best_epoch") if final else best[0],
          "untested_best_epoch": untested,
          **{key: final.get(f"final_{key}") for key in RUN_KEYS},
          "num_epochs": train.get("num_epochs"), "patience": train.get("patience"),
          "valid_curve": curve,
          "epochs_run": len(curve), "best_valid_perplexity": best[1],
          "last_epoch_seconds": (last_epoch[1] if last_epoch and last_epoch[0] != TWO_PLACES
                                 else None),
          "ran_on": list(dict.fromkeys(filter(None, map(ran_on, starts)))),
          "epoch_seconds": _epoch_seconds(seconds_by_epoch, statistics.median),
          "fastest_epoch_seconds": _epoch_seconds(seconds_by_epoch, min),
          "code_versions": list(dict.fromkeys(filter(None, (s.get("code_version")
                                                            for s in starts)))),
          "diverged": {key: diverged[key] for key in ("step", "learning_rate", "reason")}
                      if diverged else None}


def is_finished(workdir) -> bool:
  """True when `workdir` holds a run that has written its final evaluation."""
  try:
    return read_run(workdir)["finished"]
  except RunError:
    return False


# Mantissas of round tick values on a log axis, finest first (`log_ticks`).
_TICK_MANTISSAS = ((1, 1.2, 1.4, 1.6, 1.8, 2, 2.5, 3, 3.5, 4, 5, 6, 7, 8, 9),
                   (1, 1.5, 2, 3, 4, 5, 6, 8), (1, 2, 3, 5), (1, 2, 5), (1,))


def log_ticks(low: float, high: float, most: int = 10) -> list[float]:
  """Round values for a log axis spanning [low, high], whatever its range: m x 10^k for m of
  the finest series (`_TICK_MANTISSAS`) with at most `most` values inside, plus the nearest
  one either side, so that the ticks bracket the data."""
  decades = range(math.floor(math.log10(low)) - 1, math.ceil(math.log10(high)) + 1)
  for mantissas in _TICK_MANTISSAS:
    values = sorted(m * 10.0**k for k in decades for m in mantissas)
    inside = [i for i, value in enumerate(values) if low <= value <= high]
    if len(inside) <= most:
      break
  first = max(i for i, value in enumerate(values) if value <= low)
  last = min(i for i, value in enumerate(values) if value >= high and i > first)
  return values[first:last + 1]


def plot_valid_curves(curves: dict, path, title: str) -> None:
  """Validation perplexity per epoch, one line per run (log-scale y); saves a PNG.

  Args:
    curves: run name -> [[epoch, valid perplexity], ...]; runs without epochs are left out.
    path: the PNG file.
    title: the figure's title.
  """
  fig = figures.new_figure(figsize=(7, 4.5), layout="constrained")
  from matplotlib import ticker  # pylint: disable=g-import-not-at-top
  ax = fig.subplots()
  ax.set_yscale("log")
  ax.set(xlabel="epoch", ylabel="validation perplexity (log scale)", title=title)
  ax.xaxis.set_major_locator(ticker.MaxNLocator(integer=True, min_n_ticks=1))
  values = [value for curve in curves.values() for _, value in curve]
  for name, curve in curves.items():
    if curve:
      ax.plot(*zip(*curve), marker="o", markersize=3, label=name)
  if values:
    last_epoch = max(epoch for curve in curves.values() for epoch, _ in curve)
    ax.set_xlim(0.5, last_epoch + 0.5)   # Whole epochs on the axis, even for one epoch.
    ticks = log_ticks(min(values), max(values))
    ax.set_yticks(ticks, [f"{t:g}" for t in ticks])
    ax.set_ylim(ticks[0], ticks[-1])
    ax.yaxis.set_minor_locator(ticker.NullLocator())
    ax.legend(fontsize=8)
  else:
    ax.text(0.5, 0.5, "no epoch finished yet", ha="center", va="center",
            transform=ax.transAxes)
  figures.save_figure(fig, path)
