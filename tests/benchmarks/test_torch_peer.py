"""The PyTorch peer of the benchmarks computes the same loss and gradients as the JAX model,
and the benchmarks set it beside the project's own loop."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attnlm_jax import models
from attnlm_jax.models import losses

torch = pytest.importorskip("torch")
from attnlm_jax import data as data_lib  # noqa: E402  pylint: disable=g-import-not-at-top
from attnlm_jax.training import train  # noqa: E402  pylint: disable=g-import-not-at-top
from benchmarks import epoch  # noqa: E402  pylint: disable=g-import-not-at-top
from benchmarks import torch_peer  # noqa: E402  pylint: disable=g-import-not-at-top
import tiny_config  # noqa: E402  pylint: disable=g-import-not-at-top

VOCAB, HIDDEN, STEPS = 29, 8, 7


def peer_config(score):
  config = models.default_config()
  config.update(vocab_size=VOCAB, hidden_size=HIDDEN, num_layers=2, max_len=STEPS,
                score=score, dropout=0.0)
  return config


def jax_layout(model: torch_peer.AttentiveLM, arrays: dict) -> dict:
  """Peer tensors {parameter name: array} rearranged as a JAX params pytree.

  E.g. the gradients `{n: p.grad for n, p in model.named_parameters()}`. Of the two LSTM
  biases only b_ih is kept (b_hh is frozen at 0).
  """
  arrays = {name: np.asarray(value) for name, value in arrays.items()}
  out = {"embed": arrays.pop("embed"), "out_bias": arrays.pop("out_bias"), "lstm": []}
  for depth in range(model.lstm.num_layers):
    out["lstm"].append({"w_x": arrays.pop(f"lstm.weight_ih_l{depth}").T,
                        "w_h": arrays.pop(f"lstm.weight_hh_l{depth}").T,
                        "b": arrays.pop(f"lstm.bias_ih_l{depth}")})
    arrays.pop(f"lstm.bias_hh_l{depth}")
  head = {name[len("head_"):]: arrays.pop(name) for name in list(arrays)
          if name.startswith("head_")}
  if head:
    out["head"] = head
  if arrays:
    out["score"] = arrays
  return out


def random_params(config):
  """Params with every leaf random (biases too), so no term hides at 0."""
  params = models.init(jax.random.key(3), config)
  leaves, treedef = jax.tree.flatten(params)
  keys = jax.random.split(jax.random.key(4), len(leaves))
  return jax.tree.unflatten(treedef, [leaf + 0.3 * jax.random.normal(k, leaf.shape)
                                      for k, leaf in zip(keys, leaves)])


def random_batch():
  rng = np.random.default_rng(0)
  lengths = np.array([STEPS, 4, 1, 6], np.int32)
  inputs = rng.integers(1, VOCAB, (len(lengths), STEPS)).astype(np.int32)
  targets = rng.integers(1, VOCAB, (len(lengths), STEPS)).astype(np.int32)
  pad = np.arange(STEPS)[None, :] >= lengths[:, None]
  inputs[pad] = targets[pad] = 0
  return {"inputs": inputs, "targets": targets, "lengths": lengths}


@pytest.mark.parametrize("score", torch_peer.SCORES)
def test_loss_and_gradients_agree(score):
  config = peer_config(score)
  params = random_params(config)
  batch = random_batch()

  def jax_loss(params):
    logits = models.apply(params, config, batch["inputs"], batch["lengths"], train=True,
                          rng=jax.random.key(0))
    return losses.loss(logits, batch["targets"], batch["lengths"])

  loss, grads = jax.value_and_grad(jax_loss)(params)
  peer = torch_peer.AttentiveLM(VOCAB, HIDDEN, 2, score)
  torch_peer.load_jax_params(peer, params)
  peer.train()
  tb = torch_peer.to_torch(batch)
  peer_loss = torch_peer.loss_fn(peer(tb["inputs"], tb["lengths"]), tb["targets"],
                                 tb["lengths"])
  peer_loss.backward()
  np.testing.assert_allclose(peer_loss.item(), float(loss), rtol=1e-5)
  peer_grads = jax_layout(
      peer, {name: p.grad for name, p in peer.named_parameters()})
  assert jax.tree.structure(peer_grads) == jax.tree.structure(grads)
  for got, want in zip(jax.tree.leaves(peer_grads), jax.tree.leaves(grads)):
    np.testing.assert_allclose(got, np.asarray(want), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("score", ["single", "combined"])
def test_train_step_is_clipped_sgd(score):
  """One peer step moves every parameter by -lr x the JAX gradient clipped at global norm."""
  config = peer_config(score)
  params = random_params(config)
  batch = random_batch()
  grads = jax.grad(lambda p: losses.loss(models.apply(p, config, batch["inputs"],
                                                      batch["lengths"]),
                                         batch["targets"], batch["lengths"]))(params)
  norm = float(jnp.sqrt(sum(jnp.sum(g ** 2) for g in jax.tree.leaves(grads))))
  clip = norm / 3   # the step must clip
  want = jax.tree.map(lambda p, g: p - 0.5 * g * clip / norm, params, grads)
  peer = torch_peer.AttentiveLM(VOCAB, HIDDEN, 2, score)
  torch_peer.load_jax_params(peer, params)
  torch_peer.train_step(peer, torch.optim.SGD(peer.parameters(), lr=0.5),
                        torch_peer.to_torch(batch), grad_clip=clip)
  got = jax_layout(
      peer, {name: p.detach().clone() for name, p in peer.named_parameters()})
  for got_leaf, want_leaf in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
    np.testing.assert_allclose(got_leaf, np.asarray(want_leaf), rtol=1e-4, atol=1e-5)


def test_eval_step_is_summed_nll():
  config = peer_config("average")
  params = random_params(config)
  batch = random_batch()
  logits = models.apply(params, config, batch["inputs"], batch["lengths"])
  want = losses.nll_sums(logits, batch["inputs"], batch["targets"], batch["lengths"])["nll"]
  peer = torch_peer.AttentiveLM(VOCAB, HIDDEN, 2, "average")
  torch_peer.load_jax_params(peer, params)
  got, _ = torch_peer.eval_step(peer, torch_peer.to_torch(batch))
  np.testing.assert_allclose(got.item(), float(want), rtol=1e-5)


def test_unknown_score_is_a_one_line_error():
  with pytest.raises(torch_peer.PeerError, match="conv1x1.*use one of"):
    torch_peer.AttentiveLM(VOCAB, HIDDEN, 2, "conv1x1")


def test_stream_windows_carry_the_state_as_the_jax_model_does():
  """Two windows of the stream protocol, the state carried across: the peer's `window`
  gives the logits of `models.apply_window` (the epoch benchmark's stream peer)."""
  config = peer_config("none")
  params = random_params(config)
  rng = np.random.default_rng(1)
  tokens = rng.integers(1, VOCAB, (3, 2 * STEPS)).astype(np.int32)
  lengths = np.full((3,), STEPS, np.int32)
  peer = torch_peer.AttentiveLM(VOCAB, HIDDEN, 2, "none")
  torch_peer.load_jax_params(peer, params)
  peer.eval()
  jax_state = models.init_stream_state(params, config, 3)
  peer_state = (torch.zeros(2, 3, HIDDEN), torch.zeros(2, 3, HIDDEN))
  for window in (tokens[:, :STEPS], tokens[:, STEPS:]):
    jax_logits, jax_state, _ = models.apply_window(params, config, window, lengths, jax_state)
    with torch.no_grad():
      peer_logits, peer_state = peer.window(torch.from_numpy(window).long(),
                                            torch.from_numpy(lengths).long(), peer_state)
    np.testing.assert_allclose(peer_logits.numpy(), np.asarray(jax_logits), atol=1e-4)


def test_window_state_needs_the_plain_lstm():
  peer = torch_peer.AttentiveLM(VOCAB, HIDDEN, 2, "single")
  state = (torch.zeros(2, 1, HIDDEN), torch.zeros(2, 1, HIDDEN))
  with pytest.raises(torch_peer.PeerError, match="score 'none' under the stream protocol"):
    peer.window(torch.ones(1, 3, dtype=torch.long), torch.tensor([3]), state)


@pytest.mark.parametrize("span", ["sentence", "stream"])
def test_epoch_benchmark_peer_trains_what_the_loop_trains(tmp_path, span):
  """Without dropout, the PyTorch loop over the benchmark's batches ends at the parameters
  the project's training loop ends at: both sides do the same work on the same batches."""
  config = tiny_config.config(model__dropout=0.0, data__span=span,
                              model__score="none" if span == "stream" else "single")
  if span == "stream":
    config.data.update(bucket=False, batch_size=20, eval_batch_size=20)
  config = epoch.bench_config(config, 4)
  data = data_lib.load(config.data).first_batches(4)
  config, _, params = train.prepare(config, tmp_path, data=data)
  result = train.train_and_evaluate(config, tmp_path, data=data)
  peer = epoch.TorchLoop(config, params)
  peer.train_seconds(list(data.train_iterator(1)))
  trained = jax_layout(peer.model, {name: p.detach() for name, p
                                               in peer.model.named_parameters()})
  expected = models.trainable(result["params"])
  assert jax.tree.structure(trained) == jax.tree.structure(expected)
  for got, want in zip(jax.tree.leaves(trained), jax.tree.leaves(expected)):
    np.testing.assert_allclose(got, want, atol=2e-5)


def test_epoch_benchmark_sets_the_peer_beside_the_loop():
  record = tiny_config.last_json_line("benchmarks.epoch", "--config=configs/demo.py",
                                      "--config.model.hidden_size=16", "--steps=3",
                                      "--rounds=1")
  rates = record["tokens_per_s"]
  assert record["ratio_jax_over_torch"]["tokens_per_s"] == pytest.approx(
      rates["jax"] / rates["torch"], rel=1e-2, abs=1e-3)
  assert record["seconds_per_epoch"]["torch"] > 0


def test_step_parts_times_torch_lstm_layers():
  record = tiny_config.last_json_line("benchmarks.step_parts", "--shape=ptb_small",
                                      "--score=single", "--vocab_size=50", "--length=4",
                                      "--repeats=1")
  assert record["torch_lstm_layers_ms"] > 0
