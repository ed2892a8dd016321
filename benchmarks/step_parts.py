"""Where a training step's compute goes: its parts timed apart, each against the roofline.

    python -m benchmarks.step_parts --shape=ptb_medium --score=single [--length=24
        --compute_dtype=float32 --repeats=10]

One batch of `BATCH_SIZE` rows of `--length` random tokens (24 is about the mean padded
width of a bucketed PTB batch), forward and backward (`jax.grad`, jitted), each part alone:

- whole: the model's loss (`models.apply` in training mode, dropout included, and
  `losses.loss`): the step's compute without the clip and the SGD update;
- lstm_layers: the LSTM stack (`lstm.input_gates` and `lstm.scan_layer` per layer);
- recurrence: the scan alone on given input gates, h_{t-1} W_h and the gate updates: the
  matmuls that cannot be batched over time ([B, H] x [H, 4H], `--length` in a row);
- softmax: the tied output layer and the cross-entropy over the vocabulary
  (`nn.dot_transposed` and `losses.loss` on given last-layer outputs).

Each gets its median milliseconds over `--repeats` calls, its useful FLOPs (`flops.part_flops`),
its GFLOP/s and its fraction of this machine's 2048-cube matmul rate measured in the same
run (float32: the best of numpy and XLA; XLA with bfloat16 inputs for bfloat16).
`bound_if_rest_at_roofline` is the whole step's roofline fraction if everything but the
recurrence ran at the roofline and the recurrence as measured: how far the step can go
while the recurrent matmul runs at its own rate. With torch installed (`pip install
'.[bench]'`), `torch_lstm_layers_ms` times `torch.nn.LSTM` (the same layers, oneDNN's fused
kernels) forward and backward on the same inputs, in the same run. One JSON line.
"""

import importlib.util
import json
import statistics
import sys

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
import numpy as np

from attnlm_jax.common.errors import UserError
from attnlm_jax import models
from attnlm_jax.models import losses
from attnlm_jax.models import lstm
from attnlm_jax.models import nn
from benchmarks import flops
from benchmarks.shapes import BATCH_SIZE
from benchmarks.shapes import model_config
from benchmarks.shapes import SHAPES


def define_flags() -> None:
  """The command line's flags (defined when run as a program, so that importing this module
  beside the other benchmarks defines none)."""
  flags.DEFINE_enum("shape", "ptb_medium", list(SHAPES), "Model shape.")
  flags.DEFINE_string("score", "single", "Attention score (config.model.score).")
  flags.DEFINE_integer("length", 24, "Tokens per row of the timed batch.")
  flags.DEFINE_enum("compute_dtype", "float32", list(models.COMPUTE_DTYPES),
                    "Matmul input dtype (config.model.compute_dtype).")
  flags.DEFINE_integer("repeats", 10, "Timed calls per part; the median counts.")
  flags.DEFINE_integer("vocab_size", 10001, "Vocabulary size (PTB's with the pad id).")


FLAGS = flags.FLAGS


def median_ms(run, repeats: int) -> float:
  """Median milliseconds of `run()` (which waits for its result) over `flops.timings`."""
  return statistics.median(flops.timings(run, repeats)) * 1e3


def jax_parts(config, batch: int, length: int) -> dict:
  """The parts as jitted gradient functions with their arguments: {name: (fn, args)}."""
  rng = np.random.default_rng(0)
  h, dtype = config.hidden_size, models.COMPUTE_DTYPES[config.compute_dtype]
  params = models.init(jax.random.key(0), config)
  tokens = jnp.asarray(rng.integers(1, config.vocab_size, (batch, length)), jnp.int32)
  lengths = jnp.full((batch,), length, jnp.int32)
  normal = lambda *shape: jnp.asarray(rng.standard_normal(shape), jnp.float32)

  def whole(p):
    logits = models.apply(p, config, tokens, lengths, train=True, rng=jax.random.key(1))
    return losses.loss(logits, tokens, lengths)

  def lstm_layers(layers, x):
    for layer in layers:
      _, x = lstm.scan_layer(layer, lstm.input_gates(layer, x, dtype),
                             lstm.zero_state(batch, h), dtype)
    return jnp.sum(x * x)

  def recurrence(layers, gates_x):
    total = 0.0
    for layer in layers:
      _, y = lstm.scan_layer(layer, gates_x, lstm.zero_state(batch, h), dtype)
      total = total + jnp.sum(y * y)
    return total

  def softmax(embed, bias, outputs):
    return losses.loss(nn.dot_transposed(outputs, embed, dtype) + bias, tokens, lengths)

  grad = lambda fn, n: jax.jit(jax.grad(fn, argnums=tuple(range(n))))
  return {"whole": (jax.jit(jax.grad(whole)), (params,)),
          "lstm_layers": (grad(lstm_layers, 2), (params["lstm"], normal(length, batch, h))),
          "recurrence": (grad(recurrence, 2), (params["lstm"], normal(length, batch, 4 * h))),
          "softmax": (grad(softmax, 3), (params["embed"], params["out_bias"],
                                         normal(batch, length, h)))}


def torch_lstm_layers_ms(config, batch: int, length: int, repeats: int) -> float:
  """`torch.nn.LSTM` (the same stack, float32) forward and backward on [length, batch, H]."""
  import torch  # pylint: disable=g-import-not-at-top  (optional extra)
  torch.manual_seed(0)
  layers = torch.nn.LSTM(config.hidden_size, config.hidden_size, config.num_layers)
  x = torch.randn(length, batch, config.hidden_size, requires_grad=True)

  def run():
    layers.zero_grad(set_to_none=True)
    y, _ = layers(x)
    (y * y).sum().backward()
  return median_ms(run, repeats)


def measure(config, length: int, repeats: int) -> dict:
  """The JSON record of the parts of `config`'s training step on one [BATCH_SIZE, length]
  batch."""
  gemm = flops.gemm_flops()
  roofline = gemm["xla_bf16"] if config.compute_dtype == "bfloat16" else max(
      gemm["numpy_fp32"], gemm["xla_fp32"])
  work = flops.part_flops(config, BATCH_SIZE, length)
  ms = {name: median_ms(lambda fn=fn, args=args: jax.block_until_ready(fn(*args)), repeats)
        for name, (fn, args) in jax_parts(config, BATCH_SIZE, length).items()}
  rest_s = (work["whole"] - work["recurrence"]) / roofline
  record = {
      "shape": [BATCH_SIZE, length, config.hidden_size, config.num_layers, config.vocab_size],
      "score": config.score, "compute_dtype": config.compute_dtype,
      "roofline_gflops": round(roofline / 1e9, 1),
      "parts": {name: {"ms": round(ms[name], 3), "gflop": round(work[name] / 1e9, 4),
                       "gflops": round(work[name] / ms[name] / 1e6, 1),
                       "roofline_fraction": round(work[name] / ms[name] * 1e3 / roofline, 3)}
                for name in ms},
      "bound_if_rest_at_roofline": round(
          work["whole"] / roofline / (rest_s + ms["recurrence"] / 1e3), 3),
  }
  if importlib.util.find_spec("torch") is None:
    return record
  record["torch_lstm_layers_ms"] = round(torch_lstm_layers_ms(config, BATCH_SIZE, length,
                                                              repeats), 1)
  return record


def main(argv: list[str]) -> None:
  if len(argv) > 1:
    sys.exit(f"error: unexpected arguments: {' '.join(argv[1:])}")
  try:
    config = model_config(SHAPES[FLAGS.shape], FLAGS.score, FLAGS.vocab_size,
                          FLAGS.compute_dtype)
  except UserError as e:
    sys.exit(f"error: {' '.join(str(e).split())}")
  record = measure(config, FLAGS.length, FLAGS.repeats)
  record["command"] = " ".join(["python -m benchmarks.step_parts", *sys.argv[1:]])
  print(json.dumps(record))


if __name__ == "__main__":
  define_flags()
  app.run(main)
