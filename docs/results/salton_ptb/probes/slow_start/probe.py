"""Why the networks with an extra output layer start slowly: what they predict, and what
changes when only that layer's updates are scaled down (`proj_head_lr0.1`).

    python docs/results/salton_ptb/probes/slow_start/probe.py [--hidden_size=200] [--steps=300]
        [--variants=none,proj,proj_lr0.5,proj_head_lr0.1,released]
    python docs/results/salton_ptb/probes/slow_start/probe.py --table=OUTPUT   # the README's table

(from the repository root, the corpus where configs/ptb.py finds it) trains each variant below
from its config's initial parameters on the first batches of epoch 1, with the project's optimizer
(`steps.make_optimizer`: the gradient clipped at global norm 5, then SGD), and prints one JSON
line per 25 steps for each variant:

- loss: the token-weighted mean training loss (nats per token), as `train_loss` is logged;
- entropy: the mean entropy of the predicted distributions (nats). A calibrated model's
  entropy is near its loss; an entropy far below the loss means confident wrong predictions;
- top_share: the share of the predicted positions whose most likely word is the batch's most
  common prediction, and top_word: that word. Near 1 means the same guess everywhere,
  whatever the context;
- clipped: the share of steps whose gradient norm was above the clip; grad_norm: their median;
- out_bias_entropy: the entropy of softmax(b), the output bias alone (9.21 = uniform), which
  carries the context-free word frequencies.
"""

import itertools
import json

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
import numpy as np
import optax

from attnlm_jax import data as data_lib
from attnlm_jax.common import config_files
from attnlm_jax import models
from attnlm_jax.models import losses
from attnlm_jax.training import steps as steps_lib

# name: (config file and argument, config overrides, the factor on the output layer's updates:
# its parameters, `head` (W and b of h' = tanh(W h + b)), step that much less far).
VARIANTS = {
    "none": ("configs/ptb.py:score=none", {}, 1.0),
    "proj": ("configs/ptb.py:score=proj", {}, 1.0),
    "proj_lr0.5": ("configs/ptb.py:score=proj", {"train.learning_rate": 0.5}, 1.0),
    "proj_head_lr0.1": ("configs/ptb.py:score=proj", {}, 0.1),
    "released": ("configs/released.py:score=single,memory=zero_slot", {}, 1.0),
}
flags.DEFINE_integer("hidden_size", 200, "Units of each of the 2 LSTM layers.")
flags.DEFINE_integer("steps", 300, "Training steps of each variant.")
flags.DEFINE_integer("every", 25, "Steps per printed line.")
flags.DEFINE_list("variants", list(VARIANTS), "The variants to train, in this order.")
flags.DEFINE_string("table", None, "Print the markdown table of this output file instead.")
TABLE_STEPS = (100, 200, 300)   # The table's columns: the 25 steps that end at each.
FLAGS = flags.FLAGS


def make_step(config, head_factor: float):
  optimizer = steps_lib.make_optimizer(config.train)

  def loss_and_stats(params, batch, rng):
    logits = models.apply(params, config.model, batch["inputs"], batch["lengths"], train=True,
                          rng=rng)
    mask = losses.token_mask(batch["lengths"], logits.shape[1])
    log_probs = jax.nn.log_softmax(logits, axis=-1)
    entropy = -(jnp.exp(log_probs) * log_probs).sum(-1)
    guesses = jnp.where(mask, log_probs.argmax(-1), -1).ravel()
    return losses.loss(logits, batch["targets"], batch["lengths"]), {
        "nll": -jnp.where(mask, losses.token_log_probs(logits, batch["targets"]), 0.0).sum(),
        "entropy": jnp.where(mask, entropy, 0.0).sum(),
        "tokens": mask.sum(),
        "guesses": jnp.bincount(guesses + 1, length=logits.shape[-1] + 1)[1:]}

  @jax.jit
  def step(params, opt_state, batch, rng):
    (_, stats), grads = jax.value_and_grad(loss_and_stats, has_aux=True)(params, batch, rng)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    if "head" in updates:
      updates = {**updates, "head": jax.tree.map(lambda u: head_factor * u, updates["head"])}
    return optax.apply_updates(params, updates), opt_state, optax.global_norm(grads), stats

  return optimizer, step


def run(name: str, spec: str, overrides: dict, head_factor: float) -> None:
  config = config_files.load_config(spec, {**overrides,
                                             "model.hidden_size": FLAGS.hidden_size})
  data = data_lib.load(config.data)
  config.model.vocab_size = len(data.vocab)
  params = models.init(jax.random.key(config.seed), config.model)
  optimizer, step = make_step(config, head_factor)
  opt_state = optimizer.init(params)
  rng = jax.random.key(1)
  window = []
  batches = itertools.islice(data.train_iterator(1), FLAGS.steps)
  for number, batch in enumerate(batches, 1):
    batch = {key: jnp.asarray(batch[key]) for key in ("inputs", "targets", "lengths")}
    rng, step_rng = jax.random.split(rng)
    params, opt_state, norm, stats = step(params, opt_state, batch, step_rng)
    guesses = np.asarray(stats["guesses"])
    window.append((float(stats["nll"]), float(stats["entropy"]), float(stats["tokens"]),
                   float(norm), guesses.max() / guesses.sum(), int(guesses.argmax())))
    if number % FLAGS.every == 0:
      nll, entropy, tokens, norms, shares, words = map(np.array, zip(*window))
      bias = params["out_bias"]
      print(json.dumps({
          "variant": name, "hidden_size": FLAGS.hidden_size, "step": number,
          "loss": round(nll.sum() / tokens.sum(), 3),
          "entropy": round(entropy.sum() / tokens.sum(), 3),
          "top_share": round(float(shares.mean()), 3),
          "top_word": data.vocab.words[int(np.bincount(words).argmax())],
          "clipped": float((norms > config.train.grad_clip).mean()),
          "grad_norm": round(float(np.median(norms)), 2),
          "out_bias_entropy": round(float(-(jax.nn.softmax(bias) * jax.nn.log_softmax(bias))
                                          .sum()), 3),
      }), flush=True)
      window = []


def print_table(path: str) -> None:
  """Loss / entropy, and the share of steps clipped, per variant at each of TABLE_STEPS."""
  lines = [json.loads(line) for line in open(path) if '"variant"' in line]
  found = {(line["variant"], line["step"]): line for line in lines}
  print("| variant | " + " | ".join(f"steps {s - FLAGS.every + 1}-{s}: loss / entropy, clipped"
                                       for s in TABLE_STEPS) + " | out_bias_entropy at "
        f"{TABLE_STEPS[-1]} |")
  print("|---|" + "---|" * (len(TABLE_STEPS) + 1))
  for name in [name for name in VARIANTS if (name, TABLE_STEPS[-1]) in found]:
    cells = [f"{found[name, s]['loss']:.2f} / {found[name, s]['entropy']:.2f}, "
             f"{found[name, s]['clipped']:.2f}" for s in TABLE_STEPS]
    print(f"| `{name}` | " + " | ".join(cells) +
          f" | {found[name, TABLE_STEPS[-1]]['out_bias_entropy']:.2f} |")


def main(argv):
  del argv
  if FLAGS.table:
    print_table(FLAGS.table)
    return
  print(json.dumps({"variants": {
      name: dict(zip(("config", "overrides", "head_update_factor"), VARIANTS[name]))
      for name in FLAGS.variants}}), flush=True)
  for name in FLAGS.variants:
    run(name, *VARIANTS[name])


if __name__ == "__main__":
  app.run(main)
