"""What full float32 matmul precision (`attnlm_jax.models.nn.PRECISION`) changes on an accelerator.

    python -m benchmarks.matmul_precision --reference_dir=DIR   # on a CPU: the reference
    python -m benchmarks.matmul_precision --reference_dir=DIR   # on a GPU or TPU: compare

Every matmul of the models runs at `jax.lax.Precision.HIGHEST`, so that float32 training is
float32 on any backend; a GPU's default precision rounds float32 matmul inputs to TF32, a
TPU's to bfloat16. This benchmark computes one training gradient of the 2 x 650 PTB model
(`configs/ptb.py:score=SCORE`, dropout on, one batch of 32 random sentences of up to 35
tokens, fixed seeds) at HIGHEST and at the backend's DEFAULT. On a CPU it saves the HIGHEST
loss and gradient (every 97th element) to DIR as the reference; on another backend it prints
one JSON object: per precision the loss, the relative distance of the loss and of the
gradient to the CPU's, and the median milliseconds of the jitted loss-and-gradient step over
`--repeats` calls.
"""

import json
import pathlib
import time

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
import numpy as np

from attnlm_jax.common import config_files
from attnlm_jax import models
from attnlm_jax.models import nn

flags.DEFINE_string("reference_dir", None, "Where the CPU reference is written and read.",
                    required=True)
flags.DEFINE_string("score", "single", "The row of configs/ptb.py.")
flags.DEFINE_integer("repeats", 20, "Timed calls of the step (the median counts).")
FLAGS = flags.FLAGS

CONFIG_FILE = pathlib.Path(__file__).resolve().parents[1] / "configs" / "ptb.py"
VOCAB_SIZE = 10001
BATCH, WIDTH = 32, 36          # sentences, tokens per row (inputs and targets: 35 each)
SUBSAMPLE = 97                 # every 97th gradient element is kept for the comparison


def loss_and_params(score: str):
  """The model's parameters and its training loss (summed NLL / batch) on fixed batches."""
  config = config_files.load_config(f"{CONFIG_FILE}:score={score}").model
  config.vocab_size = VOCAB_SIZE
  params = models.init(jax.random.key(0), config)
  rng = np.random.default_rng(0)
  tokens = jnp.asarray(rng.integers(1, VOCAB_SIZE, (BATCH, WIDTH)), jnp.int32)
  lengths = jnp.asarray(rng.integers(5, WIDTH, (BATCH,)), jnp.int32)

  def loss(params):
    logits = models.apply(params, config, tokens[:, :-1], lengths - 1, train=True,
                          rng=jax.random.key(2))
    log_probs = jax.nn.log_softmax(logits)
    return -jnp.sum(jnp.take_along_axis(log_probs, tokens[:, 1:, None], axis=-1)) / BATCH

  return loss, params


def measure(precision, score: str, repeats: int) -> dict:
  """Loss, subsampled gradient and step milliseconds with every model matmul at `precision`."""
  loss, params = loss_and_params(score)
  step = jax.jit(jax.value_and_grad(loss))
  project_precision, nn.PRECISION = nn.PRECISION, precision   # read when the step is traced
  try:
    value, grads = jax.block_until_ready(step(params))
  finally:
    nn.PRECISION = project_precision
  seconds = []
  for _ in range(repeats):
    start = time.perf_counter()
    jax.block_until_ready(step(params))
    seconds.append(time.perf_counter() - start)
  flat = np.concatenate([np.asarray(g, np.float64).ravel() for g in jax.tree.leaves(grads)])
  return {"loss": float(value), "grad": flat[::SUBSAMPLE],
          "step_ms": 1e3 * float(np.median(seconds))}


def compare(reference_dir: pathlib.Path, score: str, repeats: int) -> dict:
  """Both precisions on this backend against the CPU reference in `reference_dir`."""
  reference = json.loads((reference_dir / "reference.json").read_text())
  reference_grad = np.load(reference_dir / "grad.npy").astype(np.float64)
  result = {"device": jax.devices()[0].device_kind, "jax": jax.__version__, "score": score,
            "cpu_reference": reference}
  for name in ("HIGHEST", "DEFAULT"):
    measured = measure(getattr(jax.lax.Precision, name), score, repeats)
    grad = measured.pop("grad")
    measured["loss_rel_diff_vs_cpu"] = abs(measured["loss"] - reference["loss"]) / abs(
        reference["loss"])
    measured["grad_rel_diff_vs_cpu"] = float(np.linalg.norm(grad - reference_grad)
                                             / np.linalg.norm(reference_grad))
    result[name] = measured
  return result


def main(argv):
  del argv
  reference_dir = pathlib.Path(FLAGS.reference_dir)
  if jax.default_backend() == "cpu":
    measured = measure(jax.lax.Precision.HIGHEST, FLAGS.score, FLAGS.repeats)
    reference_dir.mkdir(parents=True, exist_ok=True)
    np.save(reference_dir / "grad.npy", measured.pop("grad").astype(np.float32))
    (reference_dir / "reference.json").write_text(json.dumps(measured))
    print(json.dumps({"reference": str(reference_dir), **measured}))
  else:
    print(json.dumps(compare(reference_dir, FLAGS.score, FLAGS.repeats)))


if __name__ == "__main__":
  app.run(main)
