"""Incremental decoding cost of every model: per-token latency and peak memory.

    python -m benchmarks.decode [--shape=ptb_medium --scores=single,average
        --histories=35,350,3500 --tokens=20 --span=2000]

Latency: `models.step` (jitted, batch 1, evaluation mode) after `history` tokens have been
fed, with a memory of `history + 1` slots (the zero slot and the whole history; `single` and
`average` keep a running summary of fixed size instead, `models.init_state`); the median
wall time of `--tokens` steps, each waited for (generation feeds every sampled token back).

Peak memory for a `--span`-token memory span, each in a fresh subprocess whose maximum
resident set size (getrusage ru_maxrss) is the figure, next to the same process's peak
before the work (imports, parameters):
- decode: `--span` tokens through `models.step` with a `--span + 1`-slot memory;
- eval: `models.apply` on one `--span`-token row (evaluation of a document-length span).
XLA's own estimate of the evaluation's buffers (`memory_analysis` of the compiled function)
is reported too; when it exceeds `--memory_cap_gb` the evaluation is not run.

Prints one JSON line.
"""

import json
import resource
import statistics
import subprocess
import sys
import time

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
import numpy as np

from attnlm_jax.common.errors import UserError
from attnlm_jax import models
from benchmarks import shapes

VOCAB_SIZES = {"ptb": 10_000, "wikitext2": 33_278}

flags.DEFINE_enum("shape", "ptb_medium", list(shapes.SHAPES), "Model shape.")
flags.DEFINE_list("scores", list(models.SCORE_FUNCTIONS), "Models to measure.")
flags.DEFINE_list("histories", ["35", "350", "3500"], "History lengths for the latency.")
flags.DEFINE_integer("tokens", 20, "Timed steps per history length.")
flags.DEFINE_integer("span", 2000, "Memory span of the peak-memory measurement.")
flags.DEFINE_float("memory_cap_gb", 4.0, "Do not run an evaluation XLA expects to need more.")
flags.DEFINE_enum("probe", None, ["decode", "eval"],
                  "Internal: measure one peak in this process and print it.")
FLAGS = flags.FLAGS


def model_config(shape_name: str, score: str, max_len: int = shapes.MAX_LEN):
  """Evaluation config of a shape: dropout off, `max_len` memory slots in training."""
  shape = shapes.SHAPES[shape_name]
  config = shapes.model_config(shape, score, VOCAB_SIZES[shape.corpus])
  config.update(dropout=0.0, max_len=max_len)
  return config


def feed(params, config, state, tokens: jax.Array):
  """The state after `tokens` [T, B] went through `models.step` (one jitted scan)."""
  def body(state, token):
    _, state = models.step(params, config, state, token)
    return state, None
  return jax.lax.scan(body, state, tokens)[0]


def step_latency(shape_name: str, score: str, history: int, num_tokens: int) -> float:
  """Median seconds of one `models.step` after `history` tokens (a memory of history + 1
  slots where the score keeps one)."""
  config = model_config(shape_name, score)
  params = models.init(jax.random.PRNGKey(0), config)
  rng = np.random.default_rng(0)
  tokens = jnp.asarray(rng.integers(1, config.vocab_size, (history + num_tokens + 2, 1)),
                       jnp.int32)
  state = models.init_state(params, config, 1, capacity=history + 1)
  state = jax.jit(lambda p, s, t: feed(p, config, s, t))(params, state, tokens[:history])
  step = jax.jit(lambda p, s, t: models.step(p, config, s, t))
  times = []
  for i, token in enumerate(tokens[history:]):
    start = time.perf_counter()
    logits, state = step(params, state, token)
    jax.block_until_ready(logits)
    if i >= 2:   # the first calls compile
      times.append(time.perf_counter() - start)
  return statistics.median(times)


def _max_rss_bytes() -> int:
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024   # KiB on Linux


def probe(shape_name: str, score: str, mode: str, span: int, cap_bytes: float) -> dict:
  """One peak-memory measurement in this process (see the module docstring)."""
  config = model_config(shape_name, score, max_len=span)
  params = jax.block_until_ready(models.init(jax.random.PRNGKey(0), config))
  result = {"baseline_bytes": _max_rss_bytes()}
  tokens = jnp.ones((span, 1), jnp.int32)
  if mode == "decode":
    state = models.init_state(params, config, 1, capacity=span + 1)
    jax.block_until_ready(
        jax.jit(lambda p, s, t: feed(p, config, s, t))(params, state, tokens))
  else:
    run = jax.jit(lambda p, t, n: models.apply(p, config, t, n))
    compiled = run.lower(params, tokens.T, jnp.array([span], jnp.int32)).compile()
    analysis = compiled.memory_analysis()
    estimate = (analysis.temp_size_in_bytes + analysis.argument_size_in_bytes
                + analysis.output_size_in_bytes)
    result["xla_estimate_bytes"] = estimate
    if estimate > cap_bytes:
      result["skipped"] = "XLA estimate above --memory_cap_gb"
      return result
    jax.block_until_ready(compiled(params, tokens.T, jnp.array([span], jnp.int32)))
  result["peak_bytes"] = _max_rss_bytes()
  return result


def peak_memory(shape_name: str, score: str, mode: str, span: int, cap_gb: float) -> dict:
  """`probe` run in a fresh subprocess, so its max RSS is this measurement's alone."""
  command = [sys.executable, "-m", "benchmarks.decode", f"--probe={mode}",
             f"--shape={shape_name}", f"--scores={score}", f"--span={span}",
             f"--memory_cap_gb={cap_gb}"]
  done = subprocess.run(command, capture_output=True, text=True, check=False)
  if done.returncode:
    return {"error": (done.stderr.strip().splitlines() or ["failed"])[-1]}
  record = json.loads(done.stdout.strip().splitlines()[-1])
  return {key.replace("_bytes", "_mb"): round(value / 2**20, 1) if key.endswith("_bytes")
          else value for key, value in record.items()}


def check_scores(scores: list[str]) -> None:
  """Raises UserError naming an unknown score."""
  unknown = [s for s in scores if s not in models.SCORE_FUNCTIONS]
  if unknown:
    raise UserError(f"--scores: unknown {', '.join(unknown)}; choose from "
                    f"{', '.join(models.SCORE_FUNCTIONS)}")


def main(argv: list[str]) -> None:
  if len(argv) > 1:
    sys.exit(f"error: unexpected arguments: {' '.join(argv[1:])}")
  try:
    check_scores(FLAGS.scores)
    if FLAGS.probe:
      print(json.dumps(probe(FLAGS.shape, FLAGS.scores[0], FLAGS.probe, FLAGS.span,
                             FLAGS.memory_cap_gb * 2**30)))
      return
    histories = [int(h) for h in FLAGS.histories]
    record = {"shape": FLAGS.shape, "batch_size": 1, "span": FLAGS.span,
              "jax": jax.__version__, "step_latency_ms": {}, "peak_memory_mb": {}}
    for score in FLAGS.scores:
      record["step_latency_ms"][score] = {
          h: round(1e3 * step_latency(FLAGS.shape, score, h, FLAGS.tokens), 3)
          for h in histories}
      record["peak_memory_mb"][score] = {
          mode: peak_memory(FLAGS.shape, score, mode, FLAGS.span, FLAGS.memory_cap_gb)
          for mode in ("decode", "eval")}
  except UserError as e:
    sys.exit(f"error: {' '.join(str(e).split())}")
  print(json.dumps(record))


if __name__ == "__main__":
  app.run(main)
