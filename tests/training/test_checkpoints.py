"""Checkpoints: latest two + best kept, workdir checks, resuming after kill -9, SIGTERM or
SIGINT to the same result, one run per workdir."""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

from etils import epath
import jax
import numpy as np
import pytest

from attnlm_jax.data import vocab as vocab_lib
from attnlm_jax.evaluation import evaluate
from attnlm_jax import models
from attnlm_jax.training import checkpoints
from attnlm_jax.training import steps
from attnlm_jax.training import workdir_lock
import tiny_config


def _state(value: float) -> dict:
  return {"params": {"embed": np.full((5, 4), value, np.float32),
                     "lstm": [{"w": np.full((3,), value, np.float32)}]},
          "rng": np.array([0, value], np.uint32), "step": np.asarray(int(value), np.int64)}


def test_keeps_latest_and_best_and_round_trips(tmp_path):
  ckpt = checkpoints.Checkpoints(epath.Path(tmp_path), save_every_steps=2)
  assert [ckpt.should_save(s) for s in (1, 2, 3, 4)] == [False, True, False, True]
  for step, ppl in [(1, 10.0), (2, 8.0), (3, None), (4, 9.0), (5, None)]:
    ckpt.save(step, _state(step), {"epoch": step, "iterator": {"next_index": step}}, ppl)
  ckpt.wait()
  assert (ckpt.latest_step(), ckpt.best_step()) == (5, 2)
  # The best and the latest two (a resume falls back to 4 if 5 cannot be read).
  assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["2", "4", "5"]
  state, meta = ckpt.restore(2, _state(0))
  ckpt.close()
  assert meta == {"epoch": 2, "iterator": {"next_index": 2}}
  for got, want in zip(jax.tree.leaves(state), jax.tree.leaves(_state(2))):
    np.testing.assert_array_equal(got, want)


def test_a_relative_workdir_is_read_from_the_current_directory(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  ckpt = checkpoints.Checkpoints("run")
  ckpt.save(3, _state(3), {"epoch": 1}, 7.0)
  ckpt.wait()
  ckpt.close()
  reader = checkpoints.Checkpoints(epath.Path("run"), read_only=True)
  state, _ = reader.restore(reader.best_step(), _state(0))
  np.testing.assert_array_equal(state["params"]["embed"], _state(3)["params"]["embed"])
  assert (tmp_path / "run" / "checkpoints" / "3").is_dir()


def test_refuses_another_vocabulary(tmp_path):
  vocab_lib.Vocabulary.build([["a", "b"]]).save(tmp_path / checkpoints.VOCAB_FILE)
  other = vocab_lib.Vocabulary.build([["a", "c"]])
  with pytest.raises(checkpoints.CheckpointError, match="another vocabulary"):
    checkpoints.check_compatible(epath.Path(tmp_path), other, _state(1)["params"])


def test_refuses_a_run_of_another_config_but_not_other_paths_or_cadence(tmp_path):
  config = tiny_config.config()
  (tmp_path / checkpoints.CONFIG_FILE).write_text(config.to_json_best_effort())
  moved = tiny_config.config(data__data_dir="/elsewhere", train__save_every_steps=7,
                             train__log_every_steps=3, train__num_epochs=9,
                             train__learning_rate=0.125)  # longer, or a diverged run's rerun
  checkpoints.check_config(epath.Path(tmp_path), moved)
  other = tiny_config.config(model__dropout=0.0, data__batch_size=3)
  message = (f"{tmp_path} holds a run of another config (data.batch_size is "
             f"{config.data.batch_size} there, 3 here; model.dropout is {config.model.dropout} "
             f"there, 0.0 here): rerun with the config it was trained with "
             f"({tmp_path / checkpoints.CONFIG_FILE}) or use a new --workdir")
  with pytest.raises(checkpoints.CheckpointError, match=re.escape(message)):
    checkpoints.check_config(epath.Path(tmp_path), other)
  checkpoints.check_config(epath.Path(tmp_path / "new"), other)     # a new workdir: nothing


def test_a_truncated_config_json_is_a_one_line_error(tmp_path):
  (tmp_path / checkpoints.CONFIG_FILE).write_text(tiny_config.config().to_json_best_effort()[:40])
  with pytest.raises(checkpoints.CheckpointError, match="is not one JSON value.*--config="):
    checkpoints.read_config(epath.Path(tmp_path))


def test_refuses_other_parameter_shapes(tmp_path):
  vocab = vocab_lib.Vocabulary.build([["a", "b"]])
  vocab.save(tmp_path / checkpoints.VOCAB_FILE)
  ckpt = checkpoints.Checkpoints(epath.Path(tmp_path))
  ckpt.save(1, _state(1), {})
  ckpt.close()
  checkpoints.check_compatible(epath.Path(tmp_path), vocab, _state(2)["params"])  # fits
  wider = {**_state(1)["params"], "embed": np.zeros((5, 6), np.float32)}
  with pytest.raises(checkpoints.CheckpointError, match=r"embed has shape \(5, 4\) there"):
    checkpoints.check_compatible(epath.Path(tmp_path), vocab, wider)


# The stream protocol: 400 streams of the embedded corpus, read in 61 windows of 10 per epoch.
STREAM = {"data__span": "stream", "data__bucket": False}


def test_evaluation_refuses_another_span_than_the_run_trained_with(tmp_path):
  """A stream-protocol checkpoint holds the state each training row carries, which one of
  sentence rows does not: an evaluating config must ask for the run's span (its batches may
  differ: evaluation restores the carried state, whatever its rows, and does not use it)."""
  for saved, evaluating, difference in ((STREAM, {"data__bucket": False}, "stream there, "
                                                                         "sentence here"),
                                        ({}, STREAM, "sentence there, stream here")):
    (tmp_path / checkpoints.CONFIG_FILE).write_text(
        tiny_config.config(**saved).to_json_best_effort())
    with pytest.raises(checkpoints.CheckpointError, match=re.escape(
        f"{tmp_path} was trained as another network (data.span is {difference}): evaluate")):
      checkpoints.check_evaluation_config(epath.Path(tmp_path),
                                          tiny_config.config(**evaluating))
    checkpoints.check_evaluation_config(epath.Path(tmp_path), tiny_config.config(
        **saved, data__batch_size=200, data__eval_batch_size=500))


def _command(workdir, **overrides) -> list[str]:
  # 2 epochs x 50 steps; step checkpoints every 20 steps; a metrics line every step.
  return [sys.executable, "-m", "attnlm_jax.main", *tiny_config.flags(
      train__log_every_steps=1, **overrides), f"--workdir={workdir}"]


def _run(workdir, **overrides) -> None:
  subprocess.run(_command(workdir, **overrides), cwd=tiny_config.REPO, check=True,
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _last_step(workdir) -> int:
  path = workdir / "metrics.jsonl"
  lines = path.read_text().splitlines() if path.exists() else []
  return max([json.loads(l)["step"] for l in lines if l.endswith("}")] or [0])


def _checkpointed_params(workdir):
  model = evaluate.load(workdir)
  ckpt = checkpoints.Checkpoints(epath.Path(workdir), read_only=True)
  latest, meta = ckpt.restore(ckpt.latest_step(), steps.initial_state(model.config,
                                                                      model.params))
  ckpt.close()
  return model.step, model.params, latest, meta


def test_saved_config_from_before_a_field_existed_gets_its_default(tmp_path):
  saved = {"model": {"score": "combined", "hidden_size": 7, "vocab_size": 11},
           "data": {"corpus": "embedded"}, "train": {"learning_rate": 0.3}}
  (tmp_path / checkpoints.CONFIG_FILE).write_text(json.dumps(saved))
  config = checkpoints.read_config(epath.Path(tmp_path))
  assert (config.model.score, config.model.hidden_size) == ("combined", 7)
  assert config.model.streaming_min_len == models.default_config().streaming_min_len
  assert config.data.corpus == "embedded"
  assert (config.data.start_symbol, config.data.shuffle) == (True, True)
  assert (config.train.learning_rate, config.train.head_lr_factor) == (0.3, 1.0)
  models.validate(config.model)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
  """get(overrides) -> `_checkpointed_params` of an uninterrupted run (each trained once)."""
  runs = {}

  def get(overrides: dict):
    key = json.dumps(overrides, sort_keys=True)
    if key not in runs:
      workdir = tmp_path_factory.mktemp("uninterrupted") / "run"
      _run(workdir, **overrides)
      runs[key] = _checkpointed_params(workdir)
    return runs[key]
  return get


def _start(workdir, **overrides) -> subprocess.Popen:
  return subprocess.Popen(_command(workdir, **overrides), cwd=tiny_config.REPO, text=True,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _wait_for_step(workdir, step: int, process: subprocess.Popen) -> None:
  """Returns once the run in `workdir` has logged `step` (fails if it ended first)."""
  deadline = time.monotonic() + 300
  while _last_step(workdir) < step and process.poll() is None:
    assert time.monotonic() < deadline
    time.sleep(0.01)
  assert process.poll() is None, "training ended before it could be interrupted"


def _assert_ends_like(uninterrupted_run, workdir) -> None:
  """The checkpoints of `workdir` equal those of the uninterrupted run, bit for bit."""
  resumed = _checkpointed_params(workdir)
  without_time = lambda meta: {k: v for k, v in meta.items() if k != "train_seconds"}
  assert uninterrupted_run[0] == resumed[0]
  assert without_time(uninterrupted_run[3]) == without_time(resumed[3])
  for a, b in zip(jax.tree.leaves(uninterrupted_run[1:3]), jax.tree.leaves(resumed[1:3])):
    np.testing.assert_array_equal(a, b)


def _starts(workdir) -> list[dict]:
  return [json.loads(l) for l in (workdir / "metrics.jsonl").read_text().splitlines()
          if '"event": "start"' in l]


# Killed after a mid-epoch checkpoint of epoch 2 (the stream's carries the windows' state).
@pytest.mark.parametrize("overrides, kill_after, steps", [({}, 65, 100), (STREAM, 85, 122)],
                         ids=["sentence", "stream"])
def test_kill_9_then_rerun_ends_like_an_uninterrupted_run(tmp_path, uninterrupted, overrides,
                                                          kill_after, steps):
  interrupted = tmp_path / "interrupted"
  process = _start(interrupted, **overrides)
  _wait_for_step(interrupted, kill_after, process)
  os.kill(process.pid, signal.SIGKILL)
  assert process.wait() == -signal.SIGKILL, "training ended before it could be killed"
  killed_at = _last_step(interrupted)
  assert kill_after <= killed_at < steps
  assert (interrupted / workdir_lock.LOCK_FILE).exists()     # left behind by the killed run
  rerun = subprocess.run(_command(interrupted, **overrides), cwd=tiny_config.REPO,
                         capture_output=True, text=True, timeout=300)
  assert rerun.returncode == 0, rerun.stderr[-3000:]
  assert "no longer exists" in rerun.stderr and f"pid {process.pid}" in rerun.stderr
  assert 0 < _starts(interrupted)[-1]["step"] <= killed_at  # resumed from a checkpoint
  _assert_ends_like(uninterrupted(overrides), interrupted)


# SIGTERM (a preemption) and SIGINT (Ctrl-C) in the middle of epoch 2: the run saves the step
# it is in (no step lost: the next run starts where it stopped), exits 128 + the signal with
# one line, and the rerun ends bitwise like an uninterrupted run.
@pytest.mark.parametrize("signal_number, overrides, signal_after, steps_per_epoch", [
    (signal.SIGTERM, {}, 60, 50), (signal.SIGINT, STREAM, 70, 61)], ids=["SIGTERM", "SIGINT"])
def test_signal_saves_the_step_and_the_rerun_ends_like_an_uninterrupted_run(
    tmp_path, uninterrupted, signal_number, overrides, signal_after, steps_per_epoch):
  workdir = tmp_path / "run"
  process = _start(workdir, **overrides)
  _wait_for_step(workdir, signal_after, process)
  process.send_signal(signal_number)
  _, stderr = process.communicate(timeout=300)
  assert process.returncode == 128 + signal_number, stderr[-3000:]
  assert "Traceback" not in stderr
  stopped = re.fullmatch(
      rf"stopped by {signal_number.name} at step (\d+) \(epoch 2, batch (\d+)\): saved; "
      "rerun the same command to resume", stderr.strip().splitlines()[-1])
  assert stopped, stderr[-3000:]
  step, batch = int(stopped[1]), int(stopped[2])
  assert signal_after <= step < 2 * steps_per_epoch and batch == step - steps_per_epoch
  ckpt = checkpoints.Checkpoints(epath.Path(workdir), read_only=True)
  assert ckpt.latest_step() == step == _last_step(workdir)   # every step trained is saved
  ckpt.close()
  assert not (workdir / workdir_lock.LOCK_FILE).exists()
  _run(workdir, **overrides)
  assert _starts(workdir)[-1]["step"] == step
  _assert_ends_like(uninterrupted(overrides), workdir)


def test_a_second_run_on_the_workdir_is_refused_and_the_first_goes_on(tmp_path, uninterrupted):
  workdir = tmp_path / "run"
  first = _start(workdir)
  _wait_for_step(workdir, 10, first)
  first.send_signal(signal.SIGSTOP)  # Holds the first run (and its lock) while the second runs.
  try:
    files = {p: p.stat().st_mtime_ns for p in workdir.rglob("*") if p.is_file()}
    second = subprocess.run(_command(workdir), cwd=tiny_config.REPO, capture_output=True,
                            text=True, timeout=300)
    assert {p: p.stat().st_mtime_ns for p in workdir.rglob("*") if p.is_file()} == files
  finally:
    first.send_signal(signal.SIGCONT)
  lines = second.stderr.strip().splitlines()
  assert second.returncode == 1 and len(lines) == 1, second.stderr[-3000:]
  assert re.fullmatch(rf"error: {re.escape(str(workdir))} is in use by the training run of pid "
                      rf"{first.pid} on {re.escape(socket.gethostname())}, started .*: "
                      rf"wait for it to end.*",
                      lines[0]), lines[0]
  assert first.wait(timeout=300) == 0, first.stderr.read()[-3000:]
  assert len(_starts(workdir)) == 1
  _assert_ends_like(uninterrupted({}), workdir)
