"""Training and evaluation throughput of attnlm_jax against a PyTorch peer, in one process.

    python -m benchmarks.throughput --shape=ptb_medium --score=single [--steps 20 --warmup 2
        --rounds 3 --compute_dtype=float32]

Both sides run on the very same batches of real sentences (the first `--steps` batches of the
corpus's first training epoch), alternating JAX and PyTorch measurement by measurement for
`--rounds` rounds, after warm-up; each figure is the median over the rounds:

- jax_train_padded / jax_eval_padded: this project's data-parallel `steps.TrainStep`
  (forward, backward, clip at global norm 5, SGD; the state donated) and the pmapped
  `steps.eval_step` on the papers' protocol: rows truncated and padded to max_len 35, batch 32.
- jax_train_bucketed / jax_eval_bucketed: the same sentences bucketed by length (the data
  pipeline's `batching.train_plan` with bucket=True over the measured batches), each batch
  padded to its longest row. This is the project's default for training.
- torch_train_padded / torch_eval_padded: `benchmarks.torch_peer` on the padded batches.
- gemm: this machine's fp32 matmul rate (2048 x 2048, best of numpy and XLA), measured in
  the same run: the roofline (and XLA's bfloat16-input rate beside it, for reference).
- recurrent_gemm: the rate of the recurrent matmul h_{t-1} W_h ([32, H] x [H, 4H]) chained
  over 35 steps, in XLA and in PyTorch: the small matmul the recurrence is made of.

It prints one JSON line: real (non-pad) tokens/s of each measurement, the JAX/PyTorch ratios,
the JAX compile times, the useful FLOPs per real token (`useful_flops`) and each measurement's
fraction of the sgemm roofline (useful FLOPs per token x tokens/s / sgemm FLOP/s).
"""

import functools
import importlib.util
import json
import os
import statistics
import sys
import time
from typing import Callable

from absl import app
from absl import flags
import jax
import ml_collections
import numpy as np

from attnlm_jax.common.errors import UserError
from attnlm_jax import data as data_lib
from attnlm_jax.data import batching
from attnlm_jax import models
from attnlm_jax.training import parallel
from attnlm_jax.training import steps
from benchmarks.flops import gemm_flops
from benchmarks.flops import recurrent_gemm_flops
from benchmarks.flops import useful_flops
from benchmarks.shapes import BATCH_SIZE
from benchmarks.shapes import data_config
from benchmarks.shapes import MAX_LEN
from benchmarks.shapes import model_config
from benchmarks.shapes import SHAPES

flags.DEFINE_enum("shape", "ptb_medium", list(SHAPES), "Model shape and corpus.")
flags.DEFINE_string("score", "single", "Attention score (config.model.score).")
flags.DEFINE_integer("steps", 20, "Measured batches per measurement.")
flags.DEFINE_integer("warmup", 2, "Warm-up steps before each measurement.")
flags.DEFINE_integer("rounds", 3, "Alternating rounds; figures are medians over rounds.")
flags.DEFINE_enum("compute_dtype", "float32", list(models.COMPUTE_DTYPES),
                  "JAX matmul input dtype (the PyTorch peer stays float32).")
FLAGS = flags.FLAGS


class BenchmarkError(UserError):
  """A benchmark setting that cannot run."""


def measured_batches(data: data_lib.LMData, num_batches: int) -> dict:
  """The same sentences as padded batches (width max_len) and as bucketed batches.

  Returns:
    {"padded": [batch], "bucketed": [batch]}; each batch a dict of numpy arrays.
  """
  plan = data.train_plan(epoch=1)[:num_batches]
  if len(plan) < num_batches:
    raise BenchmarkError(f"--steps={num_batches} exceeds the {len(plan)} training batches "
                         "of the corpus: use fewer steps")
  tokens = data.split("train").tokens
  starts, lengths = data.units("train")

  def make(rows, width=None):
    row_lengths = batching.row_lengths(rows, lengths, MAX_LEN)
    return batching.make_batch(tokens, starts[np.maximum(rows, 0)], row_lengths,
                               width or int(row_lengths.max()))

  units = plan.reshape(-1)
  bucket_plan = batching.train_plan(np.minimum(lengths[units], MAX_LEN), BATCH_SIZE,
                                    seed=0, epoch=1, bucket=True, max_len=MAX_LEN)
  return {"padded": [make(rows, MAX_LEN) for rows in plan],
          "bucketed": [make(units[rows]) for rows in bucket_plan]}


def time_loop(run: Callable[[dict], object], batches: list, warmup: int,
              finish: Callable[[object], None]) -> float:
  """Seconds for `run` over `batches` after `warmup` steps; `finish` waits for the result."""
  for batch in (batches * warmup)[:warmup]:
    finish(run(batch))
  start = time.perf_counter()
  out = None
  for batch in batches:
    out = run(batch)
  finish(out)
  return time.perf_counter() - start


class JaxSide:
  """This project's data-parallel training step (`steps.TrainStep`) and pmapped evaluation
  step (`steps.eval_step`) with their state."""

  def __init__(self, config: ml_collections.ConfigDict, params: dict):
    run_config = ml_collections.ConfigDict({
        "model": config,
        "data": {"batch_size": BATCH_SIZE},
        "train": {"learning_rate": 1.0, "grad_clip": 5.0, "grad_shards": 0}})
    self.train_step = steps.TrainStep(run_config)
    self.p_eval = jax.pmap(functools.partial(steps.eval_step, model_config=config),
                           axis_name=steps.AXIS)
    opt_state = self.train_step.optimizer.init(models.trainable(params))
    self.state = self.train_step.initial_state(params, opt_state, step=0)
    self.rng = parallel.replicate(jax.random.PRNGKey(0))
    self.lr = parallel.replicate(np.float32(1.0))

  def device_batches(self, batches: list) -> list:
    """Each batch placed as the training step takes it, and as the evaluation step does."""
    return [(self.train_step.place(b), parallel.put_sharded(parallel.shard_batch(b)))
            for b in batches]

  def train(self, batch):
    self.state, _ = self.train_step(self.state, batch[0], self.rng, self.lr)
    return self.state.totals["nll"]

  def eval(self, batch):
    return self.p_eval(self.state.params, batch[1])


def first_call_seconds(run: Callable, batch, finish: Callable) -> float:
  """Wall time of the first call (compilation plus one step)."""
  start = time.perf_counter()
  finish(run(batch))
  return time.perf_counter() - start


def benchmark(shape_name: str, score: str, steps: int, warmup: int, rounds: int,
              compute_dtype: str) -> dict:
  """Runs every measurement and returns the JSON record."""
  from benchmarks import torch_peer  # pylint: disable=g-import-not-at-top  (optional extra)
  import torch  # pylint: disable=g-import-not-at-top

  threads = len(os.sched_getaffinity(0))
  torch.set_num_threads(threads)
  shape = SHAPES[shape_name]
  data = data_lib.load(data_config(shape.corpus))
  config = model_config(shape, score, len(data.vocab), compute_dtype)
  peer = torch_peer.AttentiveLM(config.vocab_size, shape.hidden_size, shape.num_layers,
                                score, shape.dropout, config.zero_slot)
  params = models.init(jax.random.PRNGKey(0), config)
  torch_peer.load_jax_params(peer, params)
  peer_optimizer = torch.optim.SGD(peer.parameters(), lr=1.0)

  host = measured_batches(data, steps)
  jax_side = JaxSide(config, params)
  jax_batches = {k: jax_side.device_batches(v) for k, v in host.items()}
  torch_batches = [torch_peer.to_torch(b) for b in host["padded"]]
  tokens = float(sum(b["lengths"].sum() for b in host["padded"]))
  lengths = np.concatenate([b["lengths"] for b in host["padded"]])

  block = jax.block_until_ready
  compile_s = {
      "train": first_call_seconds(jax_side.train, jax_batches["padded"][0], block),
      "eval": first_call_seconds(jax_side.eval, jax_batches["padded"][0], block)}
  widths = {b[1]["inputs"].shape[-1]: b for b in jax_batches["bucketed"]}
  start = time.perf_counter()
  for batch in widths.values():   # one compilation per bucket width, outside the timing
    block(jax_side.train(batch))
    block(jax_side.eval(batch))
  compile_s["bucket_widths"] = len(widths)
  compile_s["bucketed_train_and_eval"] = time.perf_counter() - start

  measures = {
      "jax_train_padded": (jax_side.train, jax_batches["padded"], block),
      "torch_train_padded": (lambda b: torch_peer.train_step(peer, peer_optimizer, b)[0],
                             torch_batches, lambda x: x.item()),
      "jax_eval_padded": (jax_side.eval, jax_batches["padded"], block),
      "torch_eval_padded": (lambda b: torch_peer.eval_step(peer, b)[0], torch_batches,
                            lambda x: x.item()),
      "jax_train_bucketed": (jax_side.train, jax_batches["bucketed"], block),
      "jax_eval_bucketed": (jax_side.eval, jax_batches["bucketed"], block),
  }
  seconds = {name: [] for name in measures}
  for _ in range(rounds):
    for name, (run, batches, finish) in measures.items():
      seconds[name].append(time_loop(run, batches, warmup, finish))
  rate = {name: tokens / statistics.median(s) for name, s in seconds.items()}

  gemm = gemm_flops()
  recurrent_gemm = recurrent_gemm_flops(BATCH_SIZE, shape.hidden_size)
  roofline = max(gemm["numpy_fp32"], gemm["xla_fp32"])
  flops = {"train": useful_flops(config, lengths, True) / tokens,
           "eval": useful_flops(config, lengths, False) / tokens}
  rows = {k: np.stack([b["lengths"] for b in v]) for k, v in host.items()}
  return {
      "shape": shape_name, "score": score, "compute_dtype": compute_dtype,
      "corpus": data.config.corpus, "vocab_size": config.vocab_size,
      "hidden_size": shape.hidden_size, "num_layers": shape.num_layers,
      "batch_size": BATCH_SIZE, "max_len": MAX_LEN, "steps": steps, "rounds": rounds,
      "real_tokens": int(tokens), "jax_devices": jax.local_device_count(),
      "threads": {"jax": threads, "torch": torch.get_num_threads()},
      "versions": {"jax": jax.__version__, "torch": torch.__version__},
      "pad_fraction": {"padded": batching.pad_fraction(rows["padded"], MAX_LEN),
                       "bucketed": batching.pad_fraction(rows["bucketed"])},
      "tokens_per_s": {k: round(v, 1) for k, v in rate.items()},
      "ratio_jax_over_torch": {
          "train_padded": rate["jax_train_padded"] / rate["torch_train_padded"],
          "eval_padded": rate["jax_eval_padded"] / rate["torch_eval_padded"],
          "train_defaults": rate["jax_train_bucketed"] / rate["torch_train_padded"],
          "eval_defaults": rate["jax_eval_bucketed"] / rate["torch_eval_padded"]},
      "compile_s": compile_s,
      "gemm_gflops": {k: v / 1e9 for k, v in gemm.items()},
      "recurrent_gemm_gflops": {"xla": recurrent_gemm["xla"] / 1e9,
                                "torch": recurrent_gemm["torch"] / 1e9,
                                "shape": recurrent_gemm["shape"]},
      "useful_flops_per_token": flops,
      "roofline_fraction": {
          name: flops["train" if "train" in name else "eval"] * r / roofline
          for name, r in rate.items()},
  }


def main(argv: list[str]) -> None:
  if len(argv) > 1:
    sys.exit(f"error: unexpected arguments: {' '.join(argv[1:])}")
  if importlib.util.find_spec("torch") is None:
    sys.exit("error: the PyTorch peer needs torch: pip install '.[bench]'")
  from benchmarks import torch_peer  # pylint: disable=g-import-not-at-top
  try:
    record = benchmark(FLAGS.shape, FLAGS.score, FLAGS.steps, FLAGS.warmup, FLAGS.rounds,
                       FLAGS.compute_dtype)
  except (UserError, data_lib.CorpusError, torch_peer.PeerError) as e:
    sys.exit(f"error: {' '.join(str(e).split())}")
  print(json.dumps(record))


if __name__ == "__main__":
  app.run(main)
