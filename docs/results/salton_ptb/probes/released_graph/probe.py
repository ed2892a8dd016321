#!/usr/bin/env python3
"""Probe the released attentive-LM graph (github giancds/attentive_lm).

Loads the released TensorFlow 1.x code from --released_code=DIR at run time
(nothing of it is copied here), under TensorFlow 2's tf.compat.v1 with v2
behaviour disabled and a few tf.contrib *names* mapped to their compat.v1
homes, then builds the released model at a tiny size and prints one JSON
object per line:

  train_path   : the training graph (keep_attention_weights=False, i.e.
                 tf.nn.dynamic_rnn) exactly as train_attentive_lm.py builds it:
                 context, attention weights, memory size, gradients.
  unrolled_path: the Python-unrolled graph (keep_attention_weights=True).
  perplexity   : the released run_epoch on a tiny validation model: its
                 denominator vs the number of predicted tokens.
  test_model   : the released test model (no queue) run by run_epoch.

Run with the probe's own virtualenv (see README.md), e.g.
  TF_USE_LEGACY_KERAS=1 python probe.py --released_code=/path/attentive_lm
"""
import argparse
import json
import os
import re
import subprocess
import sys
import types

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")   # compat.v1 rnn cells
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

tf.compat.v1.disable_v2_behavior()   # graph mode, v1 control flow, v1 shapes
tf.compat.v1.logging.set_verbosity(tf.compat.v1.logging.ERROR)
v1 = tf.compat.v1

VOCAB, HIDDEN, LAYERS, BATCH, STEPS = 50, 8, 2, 2, 5
# One thread each: light on the CPU.  (It does not make the order in which
# the while loop draws its dropout masks reproducible: the loss and the
# non-zero gradient magnitudes on the train_path lines vary a little between
# runs; every exact zero and every zero/non-zero verdict does not.)
SESSION_CONFIG = v1.ConfigProto(inter_op_parallelism_threads=1,
                                intra_op_parallelism_threads=1,
                                use_per_session_threads=True)


def emit(obj):
  print(json.dumps(obj, sort_keys=False), flush=True)


# --------------------------------------------------------------------------
# Shims: names only.
# --------------------------------------------------------------------------
def _sequence_loss_by_example(logits, targets, weights,
                              average_across_timesteps=True,
                              softmax_loss_function=None, name=None):
  """tf.contrib.legacy_seq2seq.sequence_loss_by_example (TF 1.x library
  function, removed in TF 2), restated from its TF 1.x documentation:
  per list entry, crossentropy * weight, summed over the list and, when
  average_across_timesteps, divided by (sum of weights + 1e-12)."""
  with tf.name_scope(name or "sequence_loss_by_example"):
    terms = []
    for logit, target, weight in zip(logits, targets, weights):
      if softmax_loss_function is None:
        xent = tf.nn.sparse_softmax_cross_entropy_with_logits(
          labels=tf.reshape(target, [-1]), logits=logit)
      else:
        xent = softmax_loss_function(labels=target, logits=logit)
      terms.append(xent * weight)
    out = tf.add_n(terms)
    if average_across_timesteps:
      out = out / (tf.add_n(weights) + 1e-12)
  return out


def make_tf1_shim():
  rnn_cell = v1.nn.rnn_cell
  # TF 1.x DropoutWrapper kept the wrapped cell in `_cell` (the released
  # attentive_lm.py:164,173 read it); compat.v1's wrapper calls it `cell`.
  if not hasattr(rnn_cell.DropoutWrapper, "_cell"):
    rnn_cell.DropoutWrapper._cell = property(lambda self: self.cell)
  # TF 1.x nest.is_sequence was renamed nest.is_nested (cells.py:37,39).
  from tensorflow.python.util import nest
  if not hasattr(nest, "is_sequence"):
    nest.is_sequence = nest.is_nested

  contrib = types.SimpleNamespace(
    rnn=types.SimpleNamespace(
      RNNCell=rnn_cell.RNNCell,
      LSTMStateTuple=rnn_cell.LSTMStateTuple,
      BasicLSTMCell=rnn_cell.BasicLSTMCell,
      DropoutWrapper=rnn_cell.DropoutWrapper,
      MultiRNNCell=rnn_cell.MultiRNNCell),
    legacy_seq2seq=types.SimpleNamespace(
      sequence_loss_by_example=_sequence_loss_by_example),
    framework=types.SimpleNamespace(
      get_or_create_global_step=v1.train.get_or_create_global_step))

  shim = types.ModuleType("tensorflow")   # `import tensorflow as tf` -> this
  shim.__dict__["contrib"] = contrib
  shim.__getattr__ = lambda name: getattr(v1, name)   # everything else
  shim.__path__ = tf.__path__
  return shim


def load_released(code_dir):
  """Import the released modules from code_dir with `tensorflow` bound to
  the shim while (and only while) they are imported."""
  shim = make_tf1_shim()
  real = sys.modules["tensorflow"]
  sys.path.insert(0, os.path.abspath(code_dir))
  sys.modules["tensorflow"] = shim
  try:
    import attention  # noqa: F401
    import cells
    import rnn  # noqa: F401
    import data_reader
    import model_ops
    import optimization_ops  # noqa: F401
    import utils  # noqa: F401
    import attentive_lm
    import train_attentive_lm
  finally:
    sys.modules["tensorflow"] = real
  return types.SimpleNamespace(cells=cells, data_reader=data_reader,
                               model_ops=model_ops, attentive_lm=attentive_lm,
                               train=train_attentive_lm)


# --------------------------------------------------------------------------
# Instrumentation (observes; the released computations are unchanged).
# --------------------------------------------------------------------------
class Spy:
  """Wraps AttentionLSTMCell._compute_decoder_context and
  attentive_lm.optimize to see what the released code builds.

  record_values=True additionally routes the returned context through
  tf.identity with a control dependency on a py_func that records the
  numeric context and weights each time the op runs (needed because
  tensors inside a tf.while_loop cannot be fetched).  Gradients are taken
  from graphs built with record_values=False."""

  def __init__(self, rel):
    self.rel = rel
    self.calls = []          # one entry per Python call (graph tracing)
    self.values = []         # numeric (ctx, weights), one per executed step
    self.captured = {}
    self.record_values = False
    self._orig_ctx = rel.cells.AttentionLSTMCell._compute_decoder_context
    self._orig_opt = rel.attentive_lm.optimize
    spy = self

    def ctx_wrapper(cell, decoder_hidden, dtype=tf.float32):
      before = len(cell.previous_hiddens)
      context = spy._orig_ctx(cell, decoder_hidden, dtype)
      weights = cell._attention_weights[-1]
      spy.calls.append(dict(
        memory_len_before=before,
        slots_scored=int(weights.get_shape()[1]),
        memory_len_after=len(cell.previous_hiddens),
        in_while_loop=_in_while_loop(context),
        context=context, weights=weights))
      if spy.record_values:
        index = tf.constant(len(spy.calls) - 1, dtype=tf.int64)
        rec = v1.py_func(spy._record, [index, context, weights], tf.int64,
                         stateful=True)
        with tf.control_dependencies([rec]):
          context = tf.identity(context)
      return context

    def opt_wrapper(cost, optimizer, global_step, max_grad_norm=5.0):
      out = spy._orig_opt(cost=cost, optimizer=optimizer,
                          global_step=global_step,
                          max_grad_norm=max_grad_norm)
      spy.captured = dict(cost=cost, train_op=out[0], grads=out[1],
                          tvars=out[2],
                          raw_grads=tf.gradients(cost, out[2]))
      return out

    rel.cells.AttentionLSTMCell._compute_decoder_context = ctx_wrapper
    rel.attentive_lm.optimize = opt_wrapper

  def _record(self, index, context, weights):
    # index: which Python call built this op (one per unrolled step; always
    # 0 inside the while loop, whose body is built once).
    self.values.append((int(index), np.array(context), np.array(weights)))
    return np.int64(0)

  def ordered_values(self):
    return [(c, w) for _, c, w in sorted(self.values, key=lambda v: v[0])]

  def reset(self, record_values):
    self.calls, self.values, self.captured = [], [], {}
    self.record_values = record_values


def _in_while_loop(t):
  ctxt = t.op._get_control_flow_context()  # pylint: disable=protected-access
  while ctxt is not None:
    if ctxt.__class__.__name__ == "WhileContext":
      return True
    ctxt = ctxt.outer_context
  return False


def tiny_config(rel, score):
  base = rel.model_ops.get_config("ptb_" + score)
  cfg = type("TinyConfig", (base,), {})
  cfg.vocab_size, cfg.hidden_size, cfg.num_layers = VOCAB, HIDDEN, LAYERS
  cfg.batch_size, cfg.num_steps = BATCH, STEPS
  return cfg


def random_sentences(rng, n, lo, hi):
  """Token ids 3..VOCAB-1 (0 PAD, 1 <eos>, 2 <unk>), ending with <eos>."""
  return [list(rng.integers(3, VOCAB, size=rng.integers(lo, hi + 1) - 1))
          + [1] for _ in range(n)]


def build_train_graph(rel, cfg, rows, keep_attention_weights):
  """As train_attentive_lm.py:103-138 (initializer, FIFOQueue, AttentiveLM
  with is_training=True); keep_attention_weights as given."""
  graph = tf.Graph()
  with graph.as_default():
    v1.set_random_seed(0)
    initializer = v1.random_uniform_initializer(
      -cfg.init_scale, cfg.init_scale, seed=rel.train.seed, dtype=tf.float32)
    with tf.name_scope("Train"):
      with v1.variable_scope("Model", reuse=None, initializer=initializer):
        queue = v1.FIFOQueue(capacity=len(rows[0]),
                             dtypes=[tf.int32, tf.int32],
                             shapes=[[cfg.num_steps]] * 2)
        enqueue = queue.enqueue_many([tf.convert_to_tensor(rows[0]),
                                      tf.convert_to_tensor(rows[1])])
        model = rel.attentive_lm.AttentiveLM(
          is_training=True, params=cfg, batch_size=cfg.batch_size,
          num_steps=cfg.num_steps, queue=queue,
          keep_attention_weights=keep_attention_weights)
    init = v1.global_variables_initializer()
  return graph, model, enqueue, init


def short(name):
  return name.replace("Model/attentive_lm/rnn/multi_rnn_cell/", "").replace(
    ":0", "")


def probe_path(rel, spy, score, keep_attention_weights, rng_seed=0):
  cfg = tiny_config(rel, score)
  rng = np.random.default_rng(rng_seed)
  sents = random_sentences(rng, BATCH, STEPS + 1, STEPS + 3)
  rows = rel.data_reader.lm_data_producer(sents, BATCH, STEPS)
  path = "unrolled_path" if keep_attention_weights else "train_path"

  # (a) pure graph: gradients as the released optimize() returns them.
  spy.reset(record_values=False)
  graph, model, enqueue, init = build_train_graph(
    rel, cfg, rows, keep_attention_weights)
  calls = list(spy.calls)
  cap = spy.captured
  with v1.Session(graph=graph, config=SESSION_CONFIG) as sess:
    sess.run(init)
    sess.run(enqueue)
    names = [v.name for v in cap["tvars"]]
    merge_bias = [v for v in cap["tvars"]
                  if "decoder_attention/Linear/Bias" in v.name]
    merge_bias_init = sess.run(merge_bias[0]) if merge_bias else None
    fetch = dict(cost=cap["cost"],
                 grads=[g if g is not None else tf.constant(0.0)
                        for g in cap["grads"]])
    out = sess.run(fetch)
  raw_none = [g is None for g in cap["raw_grads"]]
  attn_vars, merge, other = {}, {}, {}
  for name, g, is_none in zip(names, out["grads"], raw_none):
    entry = "None" if is_none else float(np.max(np.abs(g)))
    if "/score_salton_" in name:
      attn_vars[short(name)] = entry
    elif "decoder_attention/Linear/Matrix" in name:
      merge["merge_W_rows_for_h_t_max_abs_grad"] = float(
        np.max(np.abs(g[:HIDDEN])))
      merge["merge_W_rows_for_context_max_abs_grad"] = float(
        np.max(np.abs(g[HIDDEN:])))
    else:
      other[short(name)] = entry

  # (b) instrumented graph: numeric context/weights at every executed step.
  spy.reset(record_values=True)
  graph2, _, enqueue2, init2 = build_train_graph(
    rel, cfg, rows, keep_attention_weights)
  with v1.Session(graph=graph2, config=SESSION_CONFIG) as sess:
    sess.run(init2)
    sess.run(enqueue2)
    sess.run(spy.captured["cost"])
  values = spy.ordered_values()

  res = dict(
    check=path, score=score,
    built_by=("attentive_lm.AttentiveLM(is_training=True, queue=FIFOQueue, "
              "keep_attention_weights=%s)%s" % (
                keep_attention_weights,
                " as train_attentive_lm.py:132-138" if not
                keep_attention_weights else
                " (train_attentive_lm.py:132-138 with only this flag "
                "flipped; the released test model uses it, :263-267)")),
    loop=("tf.nn.dynamic_rnn (tf.while_loop)" if not keep_attention_weights
          else "python-unrolled rnn.rnn_step"),
    tokens_per_row=int(rows[0].shape[1]) + 1,
    steps_executed=len(values),
    cell_attention_calls_while_building=len(calls),
    context_op_inside_while_loop=[c["in_while_loop"] for c in calls],
    slots_scored_per_built_call=[c["slots_scored"] for c in calls],
    memory_len_after_build=calls[-1]["memory_len_after"] if calls else None,
    slots_scored_at_last_step=int(values[-1][1].shape[1]),
    context_max_abs_per_step=[float(np.max(np.abs(c))) for c, _ in values],
    attention_weights_at_first_step=values[0][1].reshape(BATCH, -1).tolist(),
    attention_weights_at_last_step=np.round(
      values[-1][1].reshape(BATCH, -1), 6).tolist(),
    attention_weights_all_exactly_one_single_slot=all(
      w.shape[1] == 1 and np.all(w == 1.0) for _, w in values),
    loss_cost=float(out["cost"]),
    attention_score_vars_max_abs_grad=attn_vars,
    **merge,
    merge_bias_init_range=(None if merge_bias_init is None else
                           [float(merge_bias_init.min()),
                            float(merge_bias_init.max())]),
    other_vars_max_abs_grad=other,
    other_vars_all_nonzero=all(isinstance(v, float) and v > 0
                               for v in other.values()),
    attention_score_vars_all_zero_or_none=all(
      v == "None" or v == 0.0 for v in attn_vars.values()),
  )
  emit(res)


def probe_perplexity(rel, spy, score):
  """Released train + validation graphs (train_attentive_lm.py:103-169) and
  the released run_epoch (train_attentive_lm.py:289-330) on 20 tiny
  sentences: compare its denominator with the tokens actually predicted."""
  spy.reset(record_values=False)
  cfg = tiny_config(rel, score)
  rng = np.random.default_rng(1)
  valid = random_sentences(rng, 20, 2, 6)
  nsteps = max(len(s) for s in valid)
  rows = rel.data_reader.lm_data_producer(valid, cfg.batch_size, nsteps)
  graph = tf.Graph()
  with graph.as_default():
    v1.set_random_seed(0)
    initializer = v1.random_uniform_initializer(
      -cfg.init_scale, cfg.init_scale, seed=rel.train.seed)
    trows = rel.data_reader.lm_data_producer(valid, cfg.batch_size,
                                             cfg.num_steps)
    with tf.name_scope("Train"):
      with v1.variable_scope("Model", reuse=None, initializer=initializer):
        tq = v1.FIFOQueue(capacity=len(trows[0]), dtypes=[tf.int32] * 2,
                          shapes=[[cfg.num_steps]] * 2)
        rel.attentive_lm.AttentiveLM(
          is_training=True, params=cfg, batch_size=cfg.batch_size,
          num_steps=cfg.num_steps, queue=tq, keep_attention_weights=False)
    with tf.name_scope("Valid"):
      with v1.variable_scope("Model", reuse=True, initializer=initializer):
        vq = v1.FIFOQueue(capacity=len(rows[0]), dtypes=[tf.int32] * 2,
                          shapes=[[nsteps]] * 2)
        venq = vq.enqueue_many([tf.convert_to_tensor(rows[0]),
                                tf.convert_to_tensor(rows[1])])
        mvalid = rel.attentive_lm.AttentiveLM(
          is_training=False, params=cfg, batch_size=cfg.batch_size,
          num_steps=nsteps, queue=vq, keep_attention_weights=False)
    init = v1.global_variables_initializer()
  # NLL per batch, fetched alongside run_epoch's own fetches.
  with v1.Session(graph=graph, config=SESSION_CONFIG) as sess:
    sess.run(init)
    sess.run(venq)
    import contextlib
    import io
    with contextlib.redirect_stdout(io.StringIO()):
      ppl = float(rel.train.run_epoch(sess, mvalid, valid, is_train=False))
  n_words = sum(len(s) for s in valid)
  predicted = int((rows[1] > 0).sum())
  total_nll = np.log(ppl) * n_words
  emit(dict(
    check="perplexity", score=score,
    sentences=len(valid), row_len_x=nsteps,
    run_epoch_denominator_n_words=n_words,
    tokens_predicted_sum_of_mask=predicted,
    first_tokens_never_predicted=n_words - predicted,
    run_epoch_ppl=ppl,
    ppl_over_predicted_tokens=float(np.exp(total_nll / predicted)),
    formula="exp(sum_batches sum_tokens NLL / n_words), n_words counts "
            "every non-PAD token incl. each sentence's first "
            "(train_attentive_lm.py:296,330; attentive_lm.py:121,129)"))


def probe_test_model(rel, spy, score):
  """As train_attentive_lm.py:239-280: a fresh graph, AttentiveLM with no
  queue (placeholders) and keep_attention_weights=True, run by run_epoch
  with an empty feed.  (a) exactly as released; (b) the same test model
  built where the variables already exist (reuse=True, after a training
  model), to see whether run_epoch could evaluate it at all."""
  spy.reset(record_values=False)
  cfg = tiny_config(rel, score)
  rng = np.random.default_rng(2)
  test = random_sentences(rng, 20, 2, 6)
  nsteps = max(len(s) for s in test)
  res = dict(check="test_model", score=score)
  for variant in ("as_released_fresh_graph", "variables_pre_created"):
    spy.reset(record_values=False)
    graph = tf.Graph()
    with graph.as_default():
      initializer = v1.random_uniform_initializer(
        -cfg.init_scale, cfg.init_scale, seed=rel.train.seed)
      reuse = None
      if variant == "variables_pre_created":
        with v1.variable_scope("Model", reuse=None, initializer=initializer):
          q = v1.FIFOQueue(capacity=BATCH, dtypes=[tf.int32] * 2,
                           shapes=[[cfg.num_steps]] * 2)
          rel.attentive_lm.AttentiveLM(
            is_training=True, params=cfg, batch_size=cfg.batch_size,
            num_steps=cfg.num_steps, queue=q, keep_attention_weights=False)
        reuse = True
      try:
        with tf.name_scope("Test"):
          with v1.variable_scope("Model", reuse=reuse,
                                 initializer=initializer):
            mtest = rel.attentive_lm.AttentiveLM(
              is_training=False, params=cfg, batch_size=cfg.batch_size,
              num_steps=nsteps, keep_attention_weights=True)
      except Exception as e:  # pylint: disable=broad-except
        res[variant] = dict(build="%s: %s" % (type(e).__name__,
                                              str(e).splitlines()[0]))
        continue
      entry = dict(build="ok", input_data_op=mtest.input_data.op.type)
      init = v1.global_variables_initializer()
    with v1.Session(graph=graph, config=SESSION_CONFIG) as sess:
      sess.run(init)
      try:
        rel.train.run_epoch(sess, mtest, test, is_train=False,
                            plot_attention_weights=True)
        entry["run_epoch"] = "ok"
      except Exception as e:  # pylint: disable=broad-except
        lines = [l for l in str(e).splitlines() if "must feed" in l]
        msg = (lines[0] if lines else str(e).splitlines()[0]).strip()[:200]
        # which of the two unfed placeholders is reported first varies
        msg = re.sub(r"'Test/Model/(input_data|targets)'",
                     "'Test/Model/input_data' (or 'Test/Model/targets')", msg)
        entry["run_epoch"] = "%s: %s" % (type(e).__name__, msg)
    res[variant] = entry
  emit(res)


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--released_code", required=True,
                  help="checkout of github.com/giancds/attentive_lm")
  ap.add_argument("--scores", default="single,combined")
  args, _ = ap.parse_known_args()
  try:
    commit = subprocess.check_output(
      ["git", "-C", args.released_code, "rev-parse", "HEAD"],
      text=True, stderr=subprocess.DEVNULL).strip()
  except Exception:  # pylint: disable=broad-except
    commit = None
  rel = load_released(args.released_code)
  spy = Spy(rel)
  emit(dict(check="setup", released_commit=commit,
            tensorflow=tf.__version__, numpy=np.__version__,
            vocab=VOCAB, hidden=HIDDEN, layers=LAYERS, batch=BATCH,
            steps=STEPS, config_base="model_ops.PTBAttentive{Single,Combined}"
            " with the sizes above overridden"))
  for score in args.scores.split(","):
    probe_path(rel, spy, score, keep_attention_weights=False)
    probe_path(rel, spy, score, keep_attention_weights=True)
  probe_perplexity(rel, spy, "single")
  probe_test_model(rel, spy, "single")


if __name__ == "__main__":
  main()
