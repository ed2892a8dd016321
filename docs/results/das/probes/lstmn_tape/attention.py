"""Where a trained LSTMN's tape attention goes, read one valid sentence at a time.

usage: python attention.py WORKDIR [MAX_SENTENCES] > attention.json

For each step t >= 1 of a sentence (the tape holds h_0 = 0 and the states h_1 .. h_t), the
weight a_t gives the most recent state h_t, the weight it gives h_0, and the entropy of a_t
against the uniform over the t + 1 slots (`analysis.attention_entropy`), each averaged over
the steps; beside them what a uniform reading would give. An LSTM reads only its last state
(weight 1 on it); the LSTMN's `~c_t` is the a_t-weighted mean of the cells on its tape.
"""

import json
import sys

import numpy as np

from attnlm_jax.evaluation import analysis
from attnlm_jax.evaluation import evaluate


def main(workdir, max_sentences=None):
  model = evaluate.load(workdir)
  if model.config.model.score != "lstmn":
    sys.exit(f"{workdir}: score {model.config.model.score!r}, not an LSTMN")
  sentences = [model.vocab.decode(s[:-1]) for s in model.data.sentences("valid")]
  sentences = sentences[:int(max_sentences)] if max_sentences else sentences
  recent, zero, uniform, ratios = [], [], [], []
  for result in analysis.forward(model, sentences, attention=True):
    weights, mask = result["weights"], result["mask"]
    stats = analysis.attention_entropy(weights, mask)
    steps = np.arange(1, len(weights))                  # step t sees slots 0 .. t
    recent.extend(weights[steps, steps])
    zero.extend(weights[steps, 0])
    uniform.extend(1.0 / (steps + 1))
    ratios.extend(stats["entropy"][steps] / stats["uniform_entropy"][steps])
  mean = lambda values: round(float(np.mean(values)), 4)
  print(json.dumps({"workdir": workdir, "sentences": len(sentences), "steps": len(recent),
                    "weight_on_most_recent_state": mean(recent),
                    "weight_on_h0": mean(zero),
                    "uniform_weight_per_slot": mean(uniform),
                    "entropy_over_uniform_entropy": mean(ratios),
                    "steps_most_recent_state_above_half": mean(np.asarray(recent) > 0.5)},
                   indent=1))


if __name__ == "__main__":
  main(*sys.argv[1:])
