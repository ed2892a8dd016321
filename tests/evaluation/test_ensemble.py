"""Interpolated models: EM weights, self-interpolation, two-model mixtures, the CLI."""

import json
import shutil

import numpy as np
import pytest

from attnlm_jax.evaluation import ensemble
from attnlm_jax.evaluation import evaluate
from attnlm_jax.models import losses
from attnlm_jax.training import train
import tiny_config


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  """Two tiny demo runs (one epoch each) that differ in score and seed, and a DAS LM under
  the stream protocol (the `das` table's protocol)."""
  paths = []
  stream = {"data__span": "stream", "data__bucket": False}
  for name, score, seed, protocol in (("single", "single", 0, {}), ("lstm", "none", 1, {}),
                                      ("das_stream", "das", 2, stream)):
    path = tmp_path_factory.mktemp(name)
    config = tiny_config.config(model__score=score, train__num_epochs=1, **protocol)
    config.seed = seed
    train.train_and_evaluate(config, path)
    paths.append(path)
  return paths


def test_em_reaches_the_stationary_point_of_the_likelihood():
  rng = np.random.default_rng(0)
  log_probs = np.log(rng.uniform(0.01, 1.0, (2, 500)))
  weights = ensemble.fit_weights(log_probs)
  p1, p2 = np.exp(log_probs)
  lam = weights[0]
  # d/d lambda of sum_t log(lambda p1 + (1 - lambda) p2) is zero at an interior optimum.
  assert 0 < lam < 1 and weights.sum() == pytest.approx(1.0)
  assert np.mean((p1 - p2) / (lam * p1 + (1 - lam) * p2)) == pytest.approx(0.0, abs=1e-4)


def test_em_puts_all_weight_on_a_model_that_is_always_better():
  log_probs = np.log(np.array([[0.5, 0.4, 0.3], [0.1, 0.1, 0.1]]))
  np.testing.assert_allclose(ensemble.fit_weights(log_probs), [1.0, 0.0], atol=1e-4)


def test_mixture_of_two_tokens_by_hand():
  log_probs = np.log(np.array([[0.5, 0.2], [0.1, 0.6]]))
  np.testing.assert_allclose(np.exp(ensemble.mixture_log_probs(log_probs, [0.25, 0.75])),
                             [0.25 * 0.5 + 0.75 * 0.1, 0.25 * 0.2 + 0.75 * 0.6])


def test_paper_convention_skips_each_sentences_first_token():
  tokens = np.array([5, 6, 1, 7, 1])                     # two sentences, EOS_ID = 1
  log_probs = np.log(np.array([0.1, 0.2, 0.3, 0.4, 0.5]))
  result = losses.stream_perplexities(tokens, log_probs)
  assert result["perplexity"] == pytest.approx(np.exp(-log_probs.mean()))
  assert result["perplexity_paper_convention"] == pytest.approx(
      np.exp(-(log_probs[1] + log_probs[2] + log_probs[4]) / 5))


@pytest.mark.parametrize("index", [0, 2], ids=["sentence", "stream"])
def test_a_model_interpolated_with_itself_keeps_its_perplexity(runs, index):
  run = runs[index]
  result = ensemble.interpolate([run, run], "valid", ["0.5", "0.5"])
  member = result["members"][0]
  for key in ("perplexity", "perplexity_paper_convention"):
    assert result[key] == pytest.approx(member[key], rel=1e-6)
  reference = evaluate.evaluate(evaluate.load(run), "valid")
  for key in ("perplexity", "perplexity_paper_convention", "tokens", "sentences"):
    assert (result if key in ("tokens", "sentences") else member)[key] == pytest.approx(
        reference[key], rel=1e-5)


def test_two_model_mixture_beats_its_worse_member_and_fitted_weights_beat_equal(runs):
  """A sentence-protocol LSTM with a stream-protocol DAS LM (the `das` table's members)."""
  runs = runs[1:]
  equal = ensemble.interpolate(runs, "valid", [0.5, 0.5])
  worse = max(m["perplexity"] for m in equal["members"])
  assert equal["perplexity"] < worse
  fitted = ensemble.interpolate(runs, "valid")
  assert fitted["weights_fitted_on"] == "valid"
  assert sum(fitted["weights"]) == pytest.approx(1.0) and min(fitted["weights"]) >= 0
  assert fitted["perplexity"] <= equal["perplexity"] * (1 + 1e-9)



def test_unequal_weights_mix_each_member_by_its_own_weight(runs):
  """0.3 / 0.7 against the mixture by hand of the members' own log-probs; swapped weights give
  another number (a model mixed with itself could not tell)."""
  runs = runs[1:]
  log_probs = [evaluate.split_log_probs(evaluate.load(run), "valid")[1] for run in runs]
  mixed = np.logaddexp(np.log(0.3) + log_probs[0], np.log(0.7) + log_probs[1])
  result = ensemble.interpolate(runs, "valid", ["0.3", "0.7"])
  assert result["perplexity"] == pytest.approx(np.exp(-mixed.mean()), rel=1e-6)
  swapped = ensemble.interpolate(runs, "valid", ["0.7", "0.3"])
  assert abs(swapped["perplexity"] / result["perplexity"] - 1) > 1e-4

def test_each_member_loads_its_corpus_once(runs, monkeypatch):
  loads = []
  load = evaluate.data_lib.load
  monkeypatch.setattr(evaluate.data_lib, "load", lambda *a, **k: loads.append(1) or load(*a, **k))
  result = ensemble.interpolate(runs, "test")      # fits on valid, scores test
  assert result["weights_fitted_on"] == "valid"
  assert len(loads) == len(runs)


@pytest.mark.parametrize("weights, message", [
    (["0.7", "0.7"], "must be 2 non-negative numbers summing to 1"),
    (["1"], "must be 2 non-negative numbers summing to 1"),
    (["a", "b"], "must be 2 non-negative numbers summing to 1"),
    (["nan", "1"], "must be 2 non-negative numbers summing to 1"),
])
def test_bad_weights_are_refused(runs, weights, message):
  with pytest.raises(ensemble.EnsembleError, match=message):
    ensemble.interpolate(runs[:2], "valid", weights)


def test_cli_prints_members_and_mixture_as_one_json_line(runs):
  result = tiny_config.run_main("--mode=evaluate", f"--workdirs={runs[0]},{runs[1]}",
                                "--split=test", "--weights=0.5,0.5", check=False)
  assert result.returncode == 0, result.stderr[-2000:]
  summary = json.loads(result.stdout.strip().splitlines()[-1])
  assert summary["split"] == "test" and summary["weights"] == [0.5, 0.5]
  assert len(summary["members"]) == 2
  assert {"perplexity", "perplexity_paper_convention", "tokens", "sentences"} <= summary.keys()
  assert summary["perplexity"] < max(m["perplexity"] for m in summary["members"])


def test_mismatched_vocabularies_are_a_one_line_error(runs, tmp_path):
  other = tmp_path / "other"
  shutil.copytree(runs[0], other)
  words = json.loads((other / "vocab.json").read_text())["words"]
  words[-1], words[-2] = words[-2], words[-1]            # same size, another vocabulary
  (other / "vocab.json").write_text(json.dumps({"words": words}))
  result = tiny_config.run_main("--mode=evaluate", f"--workdirs={runs[0]},{other}", check=False)
  assert result.returncode == 1
  errors = [l for l in result.stderr.splitlines() if l.startswith("error: ")]
  assert len(errors) == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
  assert "vocabulary of" in errors[0] and str(other) in errors[0]
