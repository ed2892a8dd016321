"""Tests of attnlm_jax.evaluation.analysis and the plots of attnlm_jax.experiments, on tiny
random-init models."""

import json
import math

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from attnlm_jax import data as data_lib
from attnlm_jax.common import errors
from attnlm_jax.data import grammar
from attnlm_jax.evaluation import analysis
from attnlm_jax.evaluation import analysis_plots
from attnlm_jax.evaluation import evaluate
from attnlm_jax.evaluation import forward_passes
from attnlm_jax.evaluation import probes
from attnlm_jax import models

import tiny_config

SENTENCES = ("the keys to the old cabinet are on the table",
             "the dog that the cats chase runs")


@pytest.fixture(scope="module")
def vocab():
  return data_lib.load(_data_config()).vocab


def _data_config() -> ml_collections.ConfigDict:
  return ml_collections.ConfigDict({
      "corpus": "embedded", "data_dir": "", "source": "text", "batch_size": 8,
      "eval_batch_size": 8, "max_len": 35, "bucket": False, "span": "sentence", "seed": 0})


def _model(vocab, score: str, seed: int = 0, memory: str = "filled",
           **params_override) -> evaluate.TrainedModel:
  """A random-init TrainedModel on the embedded corpus (1 x 8 units)."""
  config = ml_collections.ConfigDict({"data": _data_config(), "model": models.default_config()})
  config.model.update(vocab_size=len(vocab), hidden_size=8, num_layers=1, score=score,
                      max_len=12, init_scale=0.5, memory=memory)
  params = models.init(jax.random.PRNGKey(seed), config.model)
  return evaluate.TrainedModel(config, vocab, {**params, **params_override}, 0)


@pytest.mark.parametrize("score, memory", [("combined", "filled"), ("das", "filled"),
                                           ("single", "zero_slot")])
def test_drawn_weights_are_the_weights_of_apply(vocab, score, memory, tmp_path):
  model = _model(vocab, score, memory=memory)
  attentions = {score: analysis.sentence_attention(model, SENTENCES, score)}
  drawn = analysis_plots.plot_attention(attentions, tmp_path / "attention.png")
  assert (tmp_path / "attention.png").stat().st_size > 0
  for sentence, (picture,) in zip(SENTENCES, drawn):
    words = sentence.split()
    tokens = jnp.asarray([np.append(data_lib.EOS_ID, vocab.encode(words))], jnp.int32)
    n = len(words) + 1
    _, weights = models.apply(model.params, model.config.model, tokens,
                              jnp.asarray([n], jnp.int32), return_attention=True)
    weights = np.asarray(weights[0])
    mask = forward_passes.valid_slots(model.config.model, np.asarray([n]), n)[0]
    assert picture.shape == (n, n)
    np.testing.assert_array_equal(np.isnan(picture), ~mask)        # masked cells blank
    np.testing.assert_allclose(picture[mask], weights[mask], atol=1e-6)
    np.testing.assert_allclose(np.where(mask, weights, 0).sum(-1), 1.0, atol=1e-5)
    np.testing.assert_array_equal(weights > 0, mask)                # every visible slot read
  labels = attentions[score][0].slots
  expected_first = "<eos>" if score == "das" else forward_passes.ZERO_SLOT_LABEL
  assert labels[0] == expected_first and labels[1] == ("the" if score == "das" else "<eos>")


def test_model_without_attention_is_refused(vocab):
  with pytest.raises(forward_passes.AnalysisError, match="no attention weights"):
    analysis.sentence_attention(_model(vocab, "none"), SENTENCES)


def test_entropy_of_uniform_and_one_hot_rows():
  mask = np.array([[True, True, True, True, False],
                   [True, False, True, False, False],
                   [True, True, True, True, False]])
  uniform = mask / mask.sum(-1, keepdims=True)
  stats = analysis.attention_entropy(uniform, mask)
  np.testing.assert_allclose(stats["entropy"], np.log([4, 2, 4]))
  np.testing.assert_allclose(stats["entropy"] / stats["uniform_entropy"], 1.0)
  np.testing.assert_allclose(stats["kl"], 0.0, atol=1e-12)
  one_hot = np.eye(5)[[2, 0, 3]]
  stats = analysis.attention_entropy(one_hot, mask)
  np.testing.assert_allclose(stats["entropy"], 0.0)
  np.testing.assert_allclose(stats["kl"], np.log([4, 2, 4]))
  # A two-slot row (0.25, 0.75): H = -(0.25 ln 0.25 + 0.75 ln 0.75).
  stats = analysis.attention_entropy(np.array([[0.25, 0.75]]), np.array([[True, True]]))
  np.testing.assert_allclose(stats["entropy"], -(0.25 * math.log(0.25) + 0.75 * math.log(0.75)))


def test_average_model_attention_is_reported_uniform(vocab):
  effect = analysis.smoothing_effect(_model(vocab, "average"), "valid", max_sentences=40)
  assert effect["entropy_ratio"] == pytest.approx(1.0, abs=1e-6)
  assert effect["kl"] == pytest.approx(0.0, abs=1e-6)
  by_position = effect["by_position"]
  # With the zero slot, step t sees t + 1 slots: uniform entropy ln(t + 1).
  np.testing.assert_allclose(by_position["uniform_entropy"],
                             np.log(np.asarray(by_position["position"]) + 1.0))
  assert by_position["tokens"][0] == 40 and effect["sentences"] == 40


def test_learned_scores_are_not_uniform(vocab):
  # Large weights make the combined score peaked: the ratio must drop below 1.
  model = _model(vocab, "combined")
  params = dict(model.params)
  params["score"] = {k: v * 40.0 for k, v in params["score"].items()}
  model = evaluate.TrainedModel(model.config, vocab, params, 0)
  effect = analysis.smoothing_effect(model, "valid", max_sentences=20)
  assert effect["entropy_ratio"] < 0.95 and effect["kl"] > 0.05


def test_next_word_log_probs_match_step_by_step_decoding(vocab):
  model = _model(vocab, "single", seed=3)
  prefixes = [["the", "keys", "to", "the", "cabinet"], ["a", "dog"]]
  results_ = forward_passes.forward(model, prefixes)
  for prefix, result in zip(prefixes, results_):
    state = models.init_state(model.params, model.config.model, 1, capacity=16)
    for token in [data_lib.EOS_ID, *vocab.encode(prefix)]:
      logits, state = models.step(model.params, model.config.model, state,
                                  jnp.asarray([token], jnp.int32))
    np.testing.assert_allclose(result["next_log_probs"],
                               jax.nn.log_softmax(logits[0]), atol=1e-5)


def test_probe_summary_by_hand():
  items = [{"distance": 1, "attractors": 0, "construction": "pp"},
           {"distance": 1, "attractors": 1, "construction": "pp"},
           {"distance": 3, "attractors": 1, "construction": "src"},
           {"distance": 3, "attractors": 0, "construction": "src"}]
  summary = probes.probe_summary(items, np.array([-1.0, -3.0, -2.0, -9.0]),
                                   np.array([-2.0, -1.0, -4.0, -1.0]),
                                   np.array([True, True, True, False]))
  assert summary["accuracy"] == pytest.approx(2 / 3)
  assert summary["items"] == 3 and summary["skipped"] == 1
  assert summary["by_distance"] == {"1": {"accuracy": 0.5, "items": 2},
                                    "3": {"accuracy": 1.0, "items": 1}}
  assert summary["by_attractors"]["0"] == {"accuracy": 1.0, "items": 1}
  assert summary["by_attractors"]["1"] == {"accuracy": 0.5, "items": 2}


def test_probe_of_a_model_that_always_prefers_plural_verbs(vocab):
  # Zero embeddings make the logits the output bias alone, whatever the prefix: the model
  # prefers every plural verb form, so it is right exactly on the plural-subject items.
  plural = [w for w in vocab.words if grammar.verb_number(w) == grammar.PL]
  bias = np.zeros(len(vocab), np.float32)
  bias[vocab.encode(plural)] = 1.0
  model = _model(vocab, "single")
  model = _model(vocab, "single", embed=jnp.zeros_like(model.params["embed"]),
                 out_bias=jnp.asarray(bias))
  items = probes.read_probe(probes.default_probe_path())
  summary = probes.probe(model, items)
  hits = [grammar.verb_number(item["correct"]) == grammar.PL for item in items]
  assert summary["accuracy"] == pytest.approx(np.mean(hits))
  for attractors in {item["attractors"] for item in items}:
    chosen = [h for h, item in zip(hits, items) if item["attractors"] == attractors]
    assert summary["by_attractors"][str(attractors)] == {
        "accuracy": pytest.approx(np.mean(chosen)), "items": len(chosen)}


def test_read_probe_errors(tmp_path):
  path = tmp_path / "bad.jsonl"
  path.write_text('{"prefix": "the dog", "correct": "runs", "wrong": "run", "distance": 0, '
                  '"attractors": 0}\nnot json\n')
  with pytest.raises(forward_passes.AnalysisError, match=r"bad.jsonl line 2 is not JSON"):
    probes.read_probe(str(path))
  path.write_text('{"prefix": "the dog", "correct": "runs"}\n')
  with pytest.raises(forward_passes.AnalysisError,
                     match="line 1 lacks wrong, distance, attractors"):
    probes.read_probe(str(path))
  with pytest.raises(forward_passes.AnalysisError, match="not found"):
    probes.read_probe(str(tmp_path / "missing.jsonl"))
  path.write_text('{"prefix": 3, "correct": "runs", "wrong": "run", "distance": 2.5, '
                  '"attractors": 0}\n')
  with pytest.raises(forward_passes.AnalysisError,
                     match=r"line 1: prefix, distance of the wrong type"):
    probes.read_probe(str(path))
  gz = tmp_path / "plain.jsonl.gz"
  gz.write_text('{"prefix": "the dog"}\n')                   # named .gz, not gzipped
  with pytest.raises(forward_passes.AnalysisError,
                     match=r"plain.jsonl.gz is not a whole gzip file"):
    probes.read_probe(str(gz))


def test_analyze_writes_its_files(vocab, tmp_path):
  probe_file = tmp_path / "mini.jsonl"
  probe_file.write_text("".join(json.dumps(item) + "\n" for item in [
      {"prefix": "the dog", "correct": "runs", "wrong": "run", "distance": 0, "attractors": 0},
      {"prefix": "the dogs near the cat", "correct": "run", "wrong": "runs", "distance": 3,
       "attractors": 1},
      {"prefix": "the dog", "correct": "zzz", "wrong": "run", "distance": 0, "attractors": 0}]))
  trained = {"single": _model(vocab, "single"), "baseline": _model(vocab, "none")}
  summary = analysis.analyze(trained, tmp_path / "out", sentences=SENTENCES, max_sentences=10,
                             probes=probes.read_probes([str(probe_file)]))
  out = tmp_path / "out"
  for name in ("attention.png", "attention.json", "entropy.png", "entropy.json",
               "probe_mini.png", "probe_mini.json", "surprisal_0.png", "surprisal_1.png",
               "surprisal.json"):
    assert (out / name).stat().st_size > 0, name
  assert sorted(summary["files"]) == sorted(p.name for p in out.iterdir())
  attention = json.loads((out / "attention.json").read_text())
  assert list(attention[0]["models"]) == ["single"]          # the baseline has no attention
  assert attention[0]["models"]["single"]["weights"][0][1] is None   # masked -> null
  probe = json.loads((out / "probe_mini.json").read_text())
  assert probe["models"]["baseline"]["items"] == 2
  assert probe["models"]["baseline"]["skipped"] == 1
  surprisal = json.loads((out / "surprisal.json").read_text())[1]["models"]["single"]
  assert surprisal["tokens"] == SENTENCES[1].split() + ["<eos>"]
  np.testing.assert_allclose(surprisal["surprisal"],
                             -np.asarray(surprisal["log_probs"]) / math.log(2))


def test_a_model_trained_without_a_start_symbol_is_refused_by_what_reads_from_one(tmp_path):
  """Sampling, scoring and the analyses feed `<eos>` first, which a model trained with
  `data.start_symbol=False` (the released code's rows) never read."""
  model = tiny_config.untrained_model(data__bucket=False, data__start_symbol=False)
  for method, call in (
      ("sampling", lambda: evaluate.generate(model, "the", 3, 1.0, 0)),
      ("scoring", lambda: list(evaluate.score(model, ["the dog runs"]))),
      ("analysis", lambda: analysis.analyze({"released": model}, tmp_path / "out"))):
    with pytest.raises(errors.UserError, match=f"^{method} needs every token predicted"):
      call()
  assert not (tmp_path / "out").exists()
