"""The training epoch as a user times it: this project's loop against PyTorch's nn.LSTM.

    python -m benchmarks.epoch --config=configs/ptb.py:score=single [--steps=200 --rounds=2]
    python -m benchmarks.epoch --config=configs/ptb.py:score=none
    python -m benchmarks.epoch --config=configs/ptb.py:score=single \\
        --config.model.compute_dtype=bfloat16
    python -m benchmarks.epoch --config=configs/zaremba.py:size=small --example_recipe

Any config of `configs/` (and `--config.FIELD=VALUE` overrides) trains here on its own
corpus (read from a `shared/data` directory beside the clone when there is one, else from
the data root). Alternating JAX and PyTorch for `--rounds` rounds, on the very same batches
(the first `--steps` batches of epoch 1 of the config's data plan, bucketed or streamed as
the config says):

- jax: the real training loop, `train.train_and_evaluate` on a `LMData.first_batches` view
  of the corpus (data pipeline, dropout, the step, progress logging and metrics, saves); its
  tokens/s is the loop's own figure in metrics.jsonl (`log_every_steps` = `--steps`, timed
  from after the first step to the last, all finished on the devices). Compilation is out of
  the timing: round 0 compiles the step for every batch width and is not counted (every
  round's loop reuses the steps compiled for its model, `steps.TrainStep`).
- torch: the loop a PyTorch user writes (pytorch/examples' word_language_model):
  `benchmarks.torch_peer` (`torch.nn.LSTM` and its fused oneDNN kernels, the tied softmax,
  the same dropout placement and attention), cross-entropy, `clip_grad_norm_`,
  `torch.optim.SGD`, `loss.item()` every step, the stream state carried and detached across
  windows; timed from after its first step to the last.
- validation: each side's evaluation of the whole valid split (the project's
  `steps.Evaluator`; the peer without gradients), timed apart.

Seconds per epoch = the epoch's real training tokens / tokens/s + the saves of an epoch +
one validation. The roofline is this machine's matmul rate measured in the same run
(2048-cube, best of numpy and XLA in float32; XLA with bfloat16 inputs for bfloat16 configs),
and each loop's `roofline_fraction` is useful FLOPs per token (`flops.useful_flops`)
x tokens/s / that rate. Where the JAX loop's time goes (`breakdown`, seconds per epoch):
the step itself on the same batches placed beforehand, in a tight loop (`step_compute`, of
which `dropout` is the difference to the same step with dropout 0), everything else the loop
does between steps (`host_between_steps`: data, transfers, logging), `saves` (one checkpoint
timed, times the saves of an epoch) and `validation`. The step timings run in every round
right after the loop's (medians of the rounds, as for the loop; `dropout` is the median of
the rounds' differences), so the parts add up to the epoch; a difference within the timing
noise (a few percent of the step) can come out slightly negative, which says the part is too
small to measure.

`--example_recipe` sets pytorch/examples' word_language_model defaults on the config: a
2 x 200 tied LSTM, dropout 0.2, stream protocol, BPTT 35, batch 20, lr 20, clip 0.25.

It prints one JSON line (with the command that gave it); `--nopeer` times the JAX side alone
(e.g. two processes side by side, one per core, against one on both: docs/training.md).
"""

import importlib.util
import json
import os
import statistics
import sys
import tempfile
import time

from absl import app
from absl import flags
from absl import logging
from etils import epath
import jax
from ml_collections import config_flags
import numpy as np

from attnlm_jax.common.errors import UserError
from attnlm_jax.common import json_io
from attnlm_jax.common import logging_utils
from attnlm_jax.common import provenance
from attnlm_jax import data as data_lib
from attnlm_jax.data import locations
from attnlm_jax import models
from attnlm_jax.training import checkpoints
from attnlm_jax.training import parallel
from attnlm_jax.training import steps
from attnlm_jax.training import train
from benchmarks import flops
from benchmarks.shapes import SHARED_DATA


def define_flags() -> None:
  """The command line's flags (defined when run as a program, so that importing this module
  beside the other benchmarks defines none)."""
  config_flags.DEFINE_config_file("config", None,
                                  "Training config, e.g. configs/ptb.py:score=single.")
  flags.DEFINE_integer("steps", 200, "Training batches timed per round (the first of epoch 1).")
  flags.DEFINE_integer("rounds", 2, "Alternating rounds after the compiling round; medians count.")
  flags.DEFINE_bool("peer", True, "Time the PyTorch nn.LSTM peer too.")
  flags.DEFINE_bool("example_recipe", False, "Set pytorch/examples' word_language_model recipe.")


FLAGS = flags.FLAGS

# pytorch/examples word_language_model's defaults (main.py: --emsize 200 --nhid 200
# --nlayers 2 --lr 20 --clip 0.25 --bptt 35 --dropout 0.2 --batch_size 20 --tied).
EXAMPLE_RECIPE = {"model.hidden_size": 200, "model.num_layers": 2, "model.dropout": 0.2,
                  "model.tie_embeddings": True, "model.init_scale": 0.1,
                  "data.span": "stream", "data.bucket": False, "data.max_len": 35,
                  "data.batch_size": 20, "train.learning_rate": 20.0, "train.grad_clip": 0.25}


def bench_config(config, steps: int):
  """The config the timed loop runs: one epoch, one log line at the last timed step, the
  corpus from shared/data when the configured directory does not hold it."""
  config = config.copy_and_resolve_references()
  config.train.num_epochs = 1
  config.train.log_every_steps = steps
  subdir = locations.CORPORA[config.data.corpus].subdir if config.data.corpus in \
      locations.CORPORA else None
  if subdir and not epath.Path(config.data.data_dir).is_dir() and (SHARED_DATA / subdir).is_dir():
    config.data.data_dir = str(SHARED_DATA / subdir)
  return config


def jax_loop_rate(config, data: data_lib.LMData, workdir: epath.Path) -> float:
  """Tokens/s of the training loop over `data`'s (cut) epoch, as its metrics.jsonl says."""
  train.train_and_evaluate(config, workdir, data=data)
  records = json_io.read_records(workdir / logging_utils.METRICS_FILE, UserError,
                                 "run the benchmark again")
  return next(r["tokens_per_second"] for r in records if "tokens_per_second" in r)


class TorchLoop:
  """The PyTorch user's loop on the peer: train steps and a validation pass."""

  def __init__(self, config, params: dict):
    import torch  # pylint: disable=g-import-not-at-top  (optional extra)
    from benchmarks import torch_peer  # pylint: disable=g-import-not-at-top
    mc = config.model
    if not mc.tie_embeddings or mc.pos_tags:
      raise UserError("the PyTorch peer ties the softmax to the embedding and reads words "
                      "only: benchmark a config with tie_embeddings=True and pos_tags=False")
    self.torch, self.peer_lib = torch, torch_peer
    self.model = torch_peer.AttentiveLM(mc.vocab_size, mc.hidden_size, mc.num_layers, mc.score,
                                        mc.dropout, mc.zero_slot)
    torch_peer.load_jax_params(self.model, params)
    self.optimizer = torch.optim.SGD(self.model.parameters(), lr=config.train.learning_rate)
    self.grad_clip = config.train.grad_clip
    self.stream = config.data.span == "stream"

  def train_seconds(self, batches: list) -> float:
    """Seconds for batches[1:] (after the first step), `loss.item()` every step."""
    state, start = None, None
    for index, batch in enumerate(batches):
      if index == 1:
        start = time.perf_counter()
      loss, new_state = self.peer_lib.train_step(self.model, self.optimizer,
                                                 self.peer_lib.to_torch(batch), self.grad_clip,
                                                 state)
      state = new_state if self.stream else None
      loss.item()
    return time.perf_counter() - start

  def valid_seconds(self, batches) -> float:
    """Seconds of one pass over the valid batches without gradients."""
    start, state = time.perf_counter(), None
    for batch in batches:
      loss, new_state = self.peer_lib.eval_step(self.model, self.peer_lib.to_torch(batch), state)
      state = new_state if self.stream else None
      loss.item()
    return time.perf_counter() - start


def _median_rate(tokens: float, seconds: list[float]) -> float:
  return tokens / statistics.median(seconds)


class StepTimer:
  """`steps.TrainStep` alone, on batches placed on the devices beforehand: the loop's
  compute without its host work."""

  def __init__(self, config, params: dict, batches: list):
    self.step = steps.TrainStep(config)
    opt_state = self.step.optimizer.init(models.trainable(params))
    self.state = self.step.initial_state(params, opt_state, 0)
    self.rng = parallel.replicate(jax.random.PRNGKey(0))
    self.lr = parallel.replicate(np.float32(config.train.learning_rate))
    self.placed = [self.step.place(batch) for batch in batches]
    self.first_carries = None
    if config.data.span == "stream":
      self.first_carries = self.step.carries_from_host(
          steps.initial_carry(params, config.model, config.data.batch_size))
    self()  # Compiles every width.

  def __call__(self) -> float:
    """Seconds for batches[1:] (after the first step), timed as the loop is; training goes
    on from where the last call left it (the step donates its state)."""
    carries, start = self.first_carries, None
    for index, batch in enumerate(self.placed):
      if index == 1:
        jax.block_until_ready(self.state)
        start = time.perf_counter()
      self.state, carries = self.step(self.state, batch, self.rng, self.lr, carries)
    jax.block_until_ready(self.state)
    return time.perf_counter() - start


def save_seconds(config, params: dict, workdir: epath.Path) -> float:
  """Seconds of one checkpoint save of the training state (written and waited for)."""
  state = jax.device_get(steps.initial_state(config, params))
  ckpt = checkpoints.Checkpoints(workdir, 0)
  meta = {"epoch": 1, "epoch_done": False, "iterator": None, "batches_done": 0}
  start = time.perf_counter()
  ckpt.save(1, state, meta)
  ckpt.wait()
  seconds = time.perf_counter() - start
  ckpt.close()
  return seconds


def benchmark(config, num_steps: int, rounds: int, with_peer: bool,
              config_name: str = "") -> dict:
  """Runs the measurements and returns the JSON record (`config_name`: what it shows as the
  config)."""
  with tempfile.TemporaryDirectory() as tmp:
    return _measure(bench_config(config, num_steps), num_steps, rounds, with_peer,
                    epath.Path(tmp), config_name)


def _measure(config, num_steps, rounds, with_peer, tmp: epath.Path, config_name) -> dict:
  """`benchmark` with its scratch directories in `tmp`."""
  full = data_lib.load(config.data)
  data = full.first_batches(num_steps)
  config, _, params = train.prepare(config, tmp / "unused", data=data)
  train_tokens = float(full.train_tokens_per_epoch())
  batches = list(data.train_iterator(1))
  tokens = float(sum(b["lengths"].sum() for b in batches[1:]))
  lengths = np.concatenate([b["lengths"] for b in batches])
  valid_batches = list(data.eval_batches("valid", config.data.eval_batch_size))
  evaluator = steps.Evaluator(config.model)
  p_params = parallel.replicate(params)
  peer = TorchLoop(config, params) if with_peer else None
  if peer is not None:
    peer.torch.set_num_threads(len(os.sched_getaffinity(0)))

  no_dropout = config.copy_and_resolve_references()
  no_dropout.model.dropout = 0.0
  step_timers = {"jax_step": StepTimer(config, params, batches),
                 "jax_step_no_dropout": StepTimer(no_dropout, params, batches)}
  seconds = {"jax_train": [], "jax_valid": [], "torch_train": [], "torch_valid": [],
             **{name: [] for name in step_timers}}
  for round_index in range(rounds + 1):
    counted = round_index > 0  # Round 0 compiles (and warms the peer).
    rate = jax_loop_rate(config, data, tmp / f"round{round_index}")
    start = time.perf_counter()
    evaluator(p_params, data, "valid", config.data.eval_batch_size)
    valid_s = time.perf_counter() - start
    if counted:
      seconds["jax_train"].append(tokens / rate)
      seconds["jax_valid"].append(valid_s)
      for name, timer in step_timers.items():
        seconds[name].append(timer())
    if peer is not None:
      train_s, valid_s = peer.train_seconds(batches), peer.valid_seconds(valid_batches)
      if counted:
        seconds["torch_train"].append(train_s)
        seconds["torch_valid"].append(valid_s)
  save_s = save_seconds(config, params, tmp / "save")
  gemm = flops.gemm_flops()
  bf16 = config.model.compute_dtype == "bfloat16"
  roofline = gemm["xla_bf16"] if bf16 else max(gemm["numpy_fp32"], gemm["xla_fp32"])
  flops_per_token = flops.useful_flops(config.model, lengths, True) / lengths.sum()
  full_batches = full.num_train_batches()
  saves_per_epoch = (full_batches - 1) // config.train.save_every_steps + 1 \
      if config.train.save_every_steps else 1
  sides = ("jax", "torch") if peer is not None else ("jax",)
  rate = {side: _median_rate(tokens, seconds[f"{side}_train"]) for side in sides}
  valid = {side: statistics.median(seconds[f"{side}_valid"]) for side in sides}
  epoch_s = {side: train_tokens / rate[side] + valid[side] for side in sides}
  epoch_s["jax"] += saves_per_epoch * save_s
  per_epoch = train_tokens / tokens  # Timed seconds to seconds per epoch.
  compute_s = statistics.median(seconds["jax_step"]) * per_epoch
  dropout_s = statistics.median(
      a - b for a, b in zip(seconds["jax_step"], seconds["jax_step_no_dropout"])) * per_epoch
  host_s = train_tokens / rate["jax"] - compute_s
  record = {
      "config": config_name,
      "model": {key: config.model[key] for key in ("score", "hidden_size", "num_layers",
                                                   "dropout", "compute_dtype")},
      "data": {key: config.data[key] for key in ("corpus", "span", "batch_size", "max_len",
                                                 "bucket")},
      "cpu": provenance.cpu_model(), "threads": len(os.sched_getaffinity(0)),
      "versions": {"jax": jax.__version__, **({"torch": peer.torch.__version__}
                                              if peer is not None else {})},
      "steps": num_steps, "rounds": rounds, "timed_tokens": int(tokens),
      "epoch_train_tokens": int(train_tokens), "epoch_batches": full_batches,
      "tokens_per_s": {side: round(r, 1) for side, r in rate.items()},
      "seconds_per_epoch": {side: round(s, 1) for side, s in epoch_s.items()},
      "valid_seconds": {side: round(s, 2) for side, s in valid.items()},
      "gemm_gflops": {k: round(v / 1e9, 1) for k, v in gemm.items()},
      "roofline_gflops": round(roofline / 1e9, 1),
      "useful_flops_per_token": round(flops_per_token),
      "roofline_fraction": {side: round(flops_per_token * r / roofline, 3)
                            for side, r in rate.items()},
      "breakdown_seconds_per_epoch": {
          "step_compute": round(compute_s, 1),
          "dropout": round(dropout_s, 1),
          "host_between_steps": round(host_s, 1),
          "saves": round(saves_per_epoch * save_s, 1),
          "validation": round(valid["jax"], 1)},
  }
  if peer is not None:
    record["ratio_jax_over_torch"] = {"tokens_per_s": round(rate["jax"] / rate["torch"], 3),
                                      "epoch": round(epoch_s["torch"] / epoch_s["jax"], 3)}
  return record


def main(argv: list[str]) -> None:
  if len(argv) > 1:
    sys.exit(f"error: unexpected arguments: {' '.join(argv[1:])}")
  if FLAGS.config is None:
    sys.exit("error: --config is required, e.g. --config=configs/ptb.py:score=single")
  config = FLAGS.config
  if FLAGS.example_recipe:
    for key, value in EXAMPLE_RECIPE.items():
      section, field = key.split(".")
      config[section][field] = value
  if FLAGS.peer and importlib.util.find_spec("torch") is None:
    sys.exit("error: the PyTorch peer needs torch: pip install '.[bench]' (or --nopeer)")
  logging_utils.quiet_libraries()
  logging.set_verbosity(logging.WARNING)
  try:
    name = config_flags.get_config_filename(FLAGS["config"])
    record = benchmark(config, FLAGS.steps, FLAGS.rounds, FLAGS.peer,
                       name + (" --example_recipe" if FLAGS.example_recipe else ""))
  except (UserError, ValueError) as e:
    sys.exit(f"error: {' '.join(str(e).split())}")
  xla_flags = os.environ.get("XLA_FLAGS")
  record["command"] = " ".join([*([f"XLA_FLAGS={xla_flags}"] if xla_flags else []),
                                "python -m benchmarks.epoch", *sys.argv[1:]])
  print(json.dumps(record))


if __name__ == "__main__":
  define_flags()
  app.run(main)
