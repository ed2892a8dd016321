"""A training batch's dropout masks: `nn.dropout_mask` against `jax.random.bernoulli`.

    python -m benchmarks.dropout [--shape=ptb_medium --batches=30 --rounds=3]

The masks one training step draws, by the model's own `lm._dropout` (for each of the
batch's 32 rows, from `fold_in(rng, row)`, the embedding's [35, H], the [layers - 1, 35, H]
between layers and the output's [35, H]), in one jitted function: once with the project's
`nn.dropout_mask` (a random byte per element at rate 0.5) and once with it replaced by what
a JAX user writes, `jax.random.bernoulli` (one random word per element). Each runs for
`--batches` batches after a compiling call, the two alternating for `--rounds` rounds
(medians count). It prints one JSON line: milliseconds of a batch's masks for each, their
ratio, the keep rate each drew, the elements, the CPU model, the host CPUs and the command.
"""

import dataclasses
import json
import statistics
import sys
import time
from unittest import mock

from absl import app
from absl import flags
import jax
import jax.numpy as jnp

from attnlm_jax.models import lm
from attnlm_jax.models import nn
from benchmarks import provenance
from benchmarks.shapes import BATCH_SIZE
from benchmarks.shapes import MAX_LEN
from benchmarks.shapes import model_config
from benchmarks.shapes import SHAPES

FLAGS = flags.FLAGS


def define_flags() -> None:
  """The command line's flags (defined when run as a program)."""
  flags.DEFINE_enum("shape", "ptb_medium", list(SHAPES), "Model shape (benchmarks.shapes).")
  flags.DEFINE_integer("batches", 30, "Batches of masks timed per round.")
  flags.DEFINE_integer("rounds", 3, "Alternating rounds (medians count).")


def bernoulli_mask(rng: jax.Array, rate: float, shape) -> jax.Array:
  """Inverted dropout as `jax.random.bernoulli` draws it: one random word per element."""
  return jax.random.bernoulli(rng, 1.0 - rate, shape).astype(jnp.float32) / (1.0 - rate)


MASKS = {"project": nn.dropout_mask, "bernoulli": bernoulli_mask}


def batch_masks(mask_fn, config):
  """A compiled function of a key: one training batch's masks (`lm._dropout` for the
  model `config`) with `nn.dropout_mask` replaced by `mask_fn` while it compiles."""
  masks = jax.jit(lambda rng: lm._dropout(  # pylint: disable=protected-access
      rng, config, jnp.arange(BATCH_SIZE), MAX_LEN, config.hidden_size))
  with mock.patch.object(nn, "dropout_mask", mask_fn):
    return masks.lower(jax.random.key(0)).compile()


def seconds_per_batch(fn, batches: int) -> float:
  """Seconds of one batch's masks, over `batches` fresh keys (finished on the device)."""
  keys = [jax.random.key(i) for i in range(batches)]
  start = time.perf_counter()
  for key in keys:
    jax.block_until_ready(fn(key))
  return (time.perf_counter() - start) / batches


def compare(shape_name: str, batches: int, rounds: int) -> dict:
  """Both mask functions, alternating round by round (see the module docstring)."""
  shape = SHAPES[shape_name]
  rate = shape.dropout or 0.5   # A shape trained without dropout: the papers' rate.
  config = model_config(dataclasses.replace(shape, dropout=rate), "none", vocab_size=2)
  fns = {name: batch_masks(fn, config) for name, fn in MASKS.items()}
  keep = {name: float(jnp.mean(fn(jax.random.key(batches)).embed > 0))
          for name, fn in fns.items()}
  seconds = {name: [] for name in fns}
  for _ in range(rounds):
    for name, fn in fns.items():
      seconds[name].append(seconds_per_batch(fn, batches))
  ms = {name: round(1e3 * statistics.median(values), 3) for name, values in seconds.items()}
  return {"shape": shape_name, "rate": rate,
          "elements": BATCH_SIZE * MAX_LEN * shape.hidden_size * (shape.num_layers + 1),
          "batches": batches, "rounds": rounds, "ms_per_batch": ms,
          "bernoulli_over_project": round(ms["bernoulli"] / ms["project"], 3),
          "keep_rate": keep, "dropout_bytes": nn.dropout_bytes(rate)}


def main(argv: list[str]) -> None:
  if len(argv) > 1:
    sys.exit(f"error: unexpected arguments: {' '.join(argv[1:])}")
  record = compare(FLAGS.shape, FLAGS.batches, FLAGS.rounds)
  print(json.dumps({**record, **provenance.machine_and_command("benchmarks.dropout")}))


if __name__ == "__main__":
  define_flags()
  app.run(main)
