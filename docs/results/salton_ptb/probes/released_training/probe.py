#!/usr/bin/env python3
"""Train the released attentive-LM graph itself (github giancds/attentive_lm) on Penn Treebank
for its first steps, to set its training loss beside the `released` row's.

Builds the training model exactly as train_attentive_lm.py:103-138 does (the released
`ptb_single` config: 2 x 650, batch 32, rows of 36 tokens, init U(-0.05, 0.05) with seed 1701,
learning rate 1.0, clip 5; `AttentiveLM(is_training=True, queue=FIFOQueue,
keep_attention_weights=False)`), with the data read by the released `data_reader` from
--data_dir, and runs what the released `run_epoch` runs per step (`batch_loss`, `nwords`,
`train_op`) for --steps steps of epoch 0. It prints one JSON line per --log_every steps: the
token-weighted mean loss of those steps, as the project's `train_loss` is logged. The released
modules are loaded by ../released_graph/probe.py (TF 2's compat.v1 with contrib names mapped).

    TF_USE_LEGACY_KERAS=1 python probe.py --released_code=DIR --data_dir=DIR/ptb > output.jsonl
"""
import argparse
import contextlib
import importlib.util
import json
import os
import pathlib
import subprocess
import sys
import time

import numpy as np

_GRAPH_PROBE = pathlib.Path(__file__).resolve().parents[1] / "released_graph" / "probe.py"
_spec = importlib.util.spec_from_file_location("released_graph_probe", _GRAPH_PROBE)
graph_probe = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(graph_probe)   # imports TF and disables v2 behaviour
tf, v1 = graph_probe.tf, graph_probe.v1


def emit(obj):
  print(json.dumps(obj), flush=True)


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--released_code", required=True,
                      help="checkout of github.com/giancds/attentive_lm")
  parser.add_argument("--data_dir", required=True, help="ptb.{train,valid,test}.txt")
  parser.add_argument("--config", default="ptb_single")
  parser.add_argument("--steps", type=int, default=600)
  parser.add_argument("--log_every", type=int, default=50)
  parser.add_argument("--threads", type=int, default=2)
  args = parser.parse_args()

  rel = graph_probe.load_released(args.released_code)
  base = rel.model_ops.get_config(args.config)
  config = type("Config", (base,), {"data_files": [
      os.path.join(args.data_dir, f"ptb.{split}.txt") for split in ("train", "valid", "test")]})
  with contextlib.redirect_stdout(sys.stderr):   # the reader's progress lines
    vocabulary = rel.data_reader.read_vocabulary(config.data_files, config.vocab_size)
    train_data, _, _ = rel.data_reader.read_lm_data(config.data_files, vocabulary)
  inputs, targets = rel.data_reader.lm_data_producer(train_data, config.batch_size,
                                                     config.num_steps)
  commit = subprocess.run(["git", "-C", args.released_code, "rev-parse", "HEAD"],
                          capture_output=True, text=True).stdout.strip() or None
  emit({"check": "setup", "released_commit": commit, "config": args.config,
        "tensorflow": tf.__version__, "numpy": np.__version__,
        "hidden_size": config.hidden_size, "num_layers": config.num_layers,
        "batch_size": config.batch_size, "num_steps": config.num_steps,
        "learning_rate": config.learning_rate, "max_grad_norm": config.max_grad_norm,
        "init_scale": config.init_scale, "seed": rel.train.seed,
        "train_rows": int(inputs.shape[0]), "steps": args.steps, "threads": args.threads})

  graph = tf.Graph()
  with graph.as_default():
    initializer = v1.random_uniform_initializer(
        -config.init_scale, config.init_scale, seed=rel.train.seed, dtype=tf.float32)
    with tf.name_scope("Train"):
      with v1.variable_scope("Model", reuse=None, initializer=initializer):
        queue = v1.FIFOQueue(capacity=len(inputs), dtypes=[tf.int32, tf.int32],
                             shapes=[[config.num_steps]] * 2)
        # One enqueue of the whole split in corpus order (the released QueueRunner repeats
        # it; --steps stays inside epoch 0, so one suffices).
        enqueue = queue.enqueue_many([tf.convert_to_tensor(inputs, dtype=tf.int32),
                                      tf.convert_to_tensor(targets, dtype=tf.int32)])
        model = rel.attentive_lm.AttentiveLM(
            is_training=True, params=config, batch_size=config.batch_size,
            num_steps=config.num_steps, queue=queue, keep_attention_weights=False)
    init = v1.global_variables_initializer()
  session_config = v1.ConfigProto(inter_op_parallelism_threads=args.threads,
                                  intra_op_parallelism_threads=args.threads)
  assert args.steps * config.batch_size <= len(inputs), "--steps must stay inside epoch 0"
  with v1.Session(graph=graph, config=session_config) as session:
    session.run(init)
    session.run(enqueue)
    model.assign_lr(session, config.learning_rate)        # epoch 0: 1.0 * 0.5 ** 0
    fetches = {"step_cost": model.batch_loss, "niters": model.nwords,
               "eval_op": model.train_op}
    nll, words, start = 0.0, 0.0, time.time()
    for step in range(1, args.steps + 1):
      values = session.run(fetches)
      nll += float(values["step_cost"]) * float(values["niters"])
      words += float(values["niters"])
      if step % args.log_every == 0:
        emit({"step": step, "train_loss": nll / words, "tokens": words,
              "seconds": round(time.time() - start, 1)})
        nll, words, start = 0.0, 0.0, time.time()


if __name__ == "__main__":
  main()
