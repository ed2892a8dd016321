"""Tests of attnlm_jax.experiments.results: printed rows, differences to them, curves of runs."""

import json
import re

from etils import epath
import pytest

from attnlm_jax.common import logging_utils
from attnlm_jax.experiments import printed
from attnlm_jax.experiments import runs


def test_paper_results_are_found_by_corpus_and_model():
  zaremba = printed.paper_result("ptb", "Medium regularized LSTM")
  assert (zaremba.paper, zaremba.valid, zaremba.test) == (printed.ZAREMBA, 86.2, 82.7)
  assert zaremba.convention == printed.STANDARD_RULE
  assert printed.paper_result("wikitext2", "Averaging RNN-LM").test == 71.3
  with pytest.raises(KeyError, match="no printed result"):
    printed.paper_result("wikitext2", "Medium regularized LSTM")
  keys = [(p.corpus, p.model) for p in printed.PAPER_RESULTS]
  assert len(set(keys)) == len(keys)


@pytest.mark.parametrize("convention, compared, valid", [
    (printed.RELEASED_CODE_RULE, "perplexity_paper_convention", 60.0),
    (printed.STANDARD_RULE, "perplexity", 80.0),
    (printed.NOT_STATED, "perplexity", 80.0),
])
def test_differences_compare_the_number_under_the_paper_rule(convention, compared, valid):
  paper = printed.PaperResult("p", "ptb", "m", "single", "-", 50.0, 40.0, convention)
  run = {"valid_perplexity": 80.0, "valid_perplexity_paper_convention": 60.0,
         "test_perplexity": None, "test_perplexity_paper_convention": None}
  differences = printed.paper_differences(run, paper)
  assert differences["compared"] == compared
  assert differences["valid"] == {"run": valid, "printed": 50.0, "difference": valid - 50.0,
                                  "percent": pytest.approx(2 * (valid - 50.0))}
  assert differences["test"] is None


def test_read_run_keeps_the_last_validation_of_each_epoch(tmp_path):
  records = [{"event": "start", "step": 0, "num_params": 10,
              "config": {"data": {"corpus": "ptb"}, "train": {"num_epochs": 4},
                         "model": {"score": "none", "hidden_size": 8, "num_layers": 1}}},
             {"step": 5, "epoch": 1, "valid_perplexity": 9.0},
             {"event": "start", "step": 3, "num_params": 10,
              "config": {"data": {"corpus": "ptb"}, "train": {"num_epochs": 4},
                         "model": {"score": "none", "hidden_size": 8, "num_layers": 1}}},
             {"step": 5, "epoch": 1, "valid_perplexity": 8.0},
             {"step": 9, "epoch": 2, "valid_perplexity": 7.0}]
  (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
  run = runs.read_run(tmp_path)
  assert run["valid_curve"] == [[1, 8.0], [2, 7.0]]
  assert run["num_epochs"] == 4 and not run["finished"]


def test_ran_on_lists_each_place_a_run_trained_once(tmp_path):
  config = {"data": {"corpus": "ptb"}, "train": {"num_epochs": 4},
            "model": {"score": "none", "hidden_size": 8, "num_layers": 1}}
  start = lambda step, **where: {"event": "start", "step": step, "num_params": 10,
                                 "devices": 1, **where, "config": config}
  records = [start(0),                                              # a log from before
             start(3, platform="cpu", host_cpus=1),
             start(6, platform="gpu", host_cpus=16, device_kind="NVIDIA H100 80GB HBM3"),
             start(9, platform="cpu", host_cpus=1, device_kind="cpu"),
             start(12, platform="cpu", host_cpus=1, device_kind="cpu",
                   cpu_model="Intel(R) Xeon(R) Processor"),
             start(15, platform="gpu", host_cpus=16, device_kind="NVIDIA H100 80GB HBM3",
                   cpu_model="AMD EPYC")]
  (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
  assert runs.read_run(tmp_path)["ran_on"] == [
      "cpu, 1 device, 1 host CPU", "gpu (NVIDIA H100 80GB HBM3), 1 device, 16 host CPUs",
      "cpu (Intel(R) Xeon(R) Processor), 1 device, 1 host CPU"]
  assert runs.ran_on(records[0]) is None


# A timed log: a start record in a place (CPU or GPU) at a step, and epoch n ending at step
# 10 n with its cumulative training seconds.
_CPU, _GPU = {"platform": "cpu", "host_cpus": 2}, {"platform": "gpu", "host_cpus": 16}


def _start(step: int, where: dict) -> dict:
  return {"event": "start", "step": step, "num_params": 10, "devices": 1, **where,
          "config": {"data": {"corpus": "ptb"}, "train": {"num_epochs": 9},
                     "model": {"score": "none", "hidden_size": 8, "num_layers": 1}}}


def _epoch(n: int, seconds: float) -> dict:
  return {"step": 10 * n, "epoch": n, "valid_perplexity": 50.0 - n, "train_seconds": seconds}


def _read_log(tmp_path, records) -> dict:
  (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
  return runs.read_run(tmp_path)


def test_epoch_seconds_are_each_place_s_median_and_fastest_epoch(tmp_path):
  run = _read_log(tmp_path, [
      _start(0, _CPU), _epoch(1, 10.0), _epoch(2, 22.0),
      _start(15, _GPU), _epoch(2, 21.0),    # epoch 2 again, part on each: left out
      _epoch(3, 25.0), _epoch(4, 29.0), _epoch(5, 32.0),
      _start(50, _CPU), _epoch(7, 50.0)])   # no epoch 6 in the log: 7 is not timed
  assert run["epoch_seconds"] == {
      "gpu, 1 device, 16 host CPUs": 4.0,          # epochs 3 to 5: 4, 4, 3
      "cpu, 1 device, 2 host CPUs": 10.0}          # epoch 1 only
  assert run["fastest_epoch_seconds"] == {
      "gpu, 1 device, 16 host CPUs": 3.0, "cpu, 1 device, 2 host CPUs": 10.0}


def test_an_epoch_split_between_two_places_is_timed_in_neither(tmp_path):
  """A row moved from a GPU to a CPU mid-epoch: that epoch's seconds are part of each
  place's; an epoch resumed elsewhere exactly at its start belongs to the new place."""
  records = [_start(0, _GPU), _epoch(1, 10.0), _epoch(2, 20.0),
             _start(25, _CPU), _epoch(3, 100.0), _epoch(4, 160.0),   # epoch 3: split
             _start(40, _GPU), _epoch(5, 165.0)]                     # epoch 5: all on the GPU
  run = _read_log(tmp_path, records)
  assert run["fastest_epoch_seconds"] == {
      "gpu, 1 device, 16 host CPUs": 5.0, "cpu, 1 device, 2 host CPUs": 60.0}
  assert run["epoch_seconds"] == {
      "gpu, 1 device, 16 host CPUs": 10.0, "cpu, 1 device, 2 host CPUs": 60.0}
  assert run["last_epoch_seconds"] == 5.0
  assert _read_log(tmp_path, records[:5])["last_epoch_seconds"] is None   # epoch 3: split


def test_a_record_cut_off_by_a_hard_kill_is_left_out_and_the_resumed_log_reads(tmp_path):
  """A last line without its newline (a record cut off, or being written) is left out; the
  resumed run's writer drops it instead of gluing its first record to it; any other line
  that is not JSON is named."""
  records = [_start(0, _CPU), _epoch(1, 10.0)]
  path = tmp_path / "metrics.jsonl"
  path.write_text("".join(json.dumps(r) + "\n" for r in records) + '{"step": 12, "lo')
  assert runs.read_run(tmp_path)["valid_curve"] == [[1, 49.0]]
  writer = logging_utils.MetricWriter(epath.Path(tmp_path))
  writer.write_scalars(12, {"loss": 3.0})
  writer.close()
  assert path.read_text().splitlines()[-1] == '{"step": 12, "loss": 3.0}'
  assert runs.read_run(tmp_path)["epochs_run"] == 1
  for broken in ('{"step": 12, "lo\n', '{"step": 12, "lo\n{"step": 13}\n'):
    path.write_text(json.dumps(records[0]) + "\n" + broken)
    with pytest.raises(runs.RunError, match=re.escape(
        f"{path}, line 2, is not a JSON record (Unterminated string starting at): restore the "
        "file from a copy of the run, or delete that line")):
      runs.read_run(tmp_path)


def test_a_directory_without_a_log_is_not_a_run(tmp_path):
  with pytest.raises(runs.RunError, match="not the --workdir of a training run"):
    runs.read_run(tmp_path)


@pytest.mark.parametrize("low, high, expected", [
    (89.3, 172.0, [80, 90, 100, 120, 140, 160, 180]),
    (58.0, 1000.0, [50, 100, 200, 300, 500, 1000]),
    (70.1, 71.5, [70, 80]),
    (100.0, 100.0, [100, 120]),
])
def test_log_ticks_bracket_the_data_with_round_values(low, high, expected):
  assert runs.log_ticks(low, high) == pytest.approx(expected)


def test_plot_valid_curves_draws_runs_with_epochs(tmp_path, monkeypatch):
  runs.plot_valid_curves({"a": [[1, 150.0], [2, 120.0]], "b": []}, tmp_path / "c.png", "t")
  assert (tmp_path / "c.png").read_bytes()[:4] == b"\x89PNG"
  drawn = []
  monkeypatch.setattr(runs.figures, "save_figure", lambda fig, path: drawn.append(fig))
  runs.plot_valid_curves({"a": [[1, 150.0], [2, 120.0]], "b": []}, tmp_path / "c.png", "t")
  runs.plot_valid_curves({"b": []}, tmp_path / "empty.png", "t")
  curves, empty = drawn[0].axes[0], drawn[1].axes[0]
  [line] = curves.get_lines()                     # "b" has no epochs: no line
  assert (line.get_label(), list(line.get_xdata()), list(line.get_ydata())) == (
      "a", [1, 2], [150.0, 120.0])
  assert not empty.get_lines()
  assert [text.get_text() for text in empty.texts] == ["no epoch finished yet"]


@pytest.mark.parametrize("epochs", [1, 2, 28])
def test_the_curves_epoch_axis_shows_whole_epochs(tmp_path, monkeypatch, epochs):
  drawn = []
  monkeypatch.setattr(runs.figures, "save_figure", lambda fig, path: drawn.append(fig))
  curve = [[epoch, 100.0 + 300.0 / epoch] for epoch in range(1, epochs + 1)]
  runs.plot_valid_curves({"a": curve}, tmp_path / "c.png", "t")
  axis = drawn[0].axes[0]
  low, high = axis.get_xlim()
  shown = [tick for tick in axis.get_xticks() if low <= tick <= high]
  assert shown and all(tick == int(tick) and 1 <= tick <= epochs for tick in shown), shown
