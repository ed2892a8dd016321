"""Multi-process training: two JAX processes on this machine equal one process.

The demo config (tests/tiny_config.py) is trained as two CPU processes of one device each,
joined over loopback (`--coordinator_address`, gloo collectives), and as one process of two
devices: the same global batch over the same device count, so the parameters must agree.
"""

import json
import os
import re
import signal
import subprocess
import sys
import time

from etils import epath
import jax
import numpy as np
import portpicker
import pytest

from attnlm_jax.common import logging_utils
from attnlm_jax.data import pipeline
from attnlm_jax.evaluation import evaluate
from attnlm_jax.training import checkpoints
from attnlm_jax.training import distributed
from attnlm_jax.training import steps
import tiny_config

pytestmark = pytest.mark.slow  # Several JAX processes on this machine.

# One epoch of 13 steps (batch 1600), a step checkpoint after step 10.
OVERRIDES = {"train__num_epochs": 1, "train__save_every_steps": 10,
             "train__log_every_steps": 5, "data__batch_size": 1600}
TIMEOUT = 150


def _command(workdir, *extra) -> list[str]:
  return [sys.executable, "-m", "attnlm_jax.main", *tiny_config.flags(**OVERRIDES),
          f"--workdir={workdir}", *extra]


def _env(devices: int) -> dict:
  return {**os.environ, "JAX_PLATFORMS": "cpu",
          "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}"}


def _tail(text: str, lines: int = 15) -> str:
  return "\n".join(text.strip().splitlines()[-lines:])


def _run_all(commands: list[tuple[list[str], int]]) -> list[str]:
  """Runs (command, host devices) pairs at once; fails with the stderr tails unless all exit 0."""
  processes = [subprocess.Popen(c, cwd=tiny_config.REPO, env=_env(devices), text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
               for c, devices in commands]
  outputs = []
  try:
    for process in processes:
      outputs.append(process.communicate(timeout=TIMEOUT))
  except subprocess.TimeoutExpired:
    for process in processes:
      process.kill()
    tails = [_tail(p.communicate()[1]) for p in processes]
    pytest.fail(f"timed out after {TIMEOUT} s; stderr tails:\n" + "\n---\n".join(tails))
  failed = [(i, out[1]) for i, (p, out) in enumerate(zip(processes, outputs))
            if p.returncode != 0]
  if failed:
    pytest.fail("\n---\n".join(f"process {i} exited with status {processes[i].returncode}:"
                               f"\n{_tail(err)}" for i, err in failed))
  return [out for out, _ in outputs]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  """Workdirs of the same run as two processes x 1 device and as 1 process x 2 devices."""
  two, one = tmp_path_factory.mktemp("two_processes"), tmp_path_factory.mktemp("one_process")
  address = f"127.0.0.1:{portpicker.pick_unused_port()}"
  _run_all([(_command(two, f"--coordinator_address={address}", "--num_processes=2",
                      f"--process_id={i}"), 1) for i in range(2)] + [(_command(one), 2)])
  return two, one


def test_sigterm_to_one_process_stops_both_at_the_same_saved_step(tmp_path):
  """JAX's preemption service: the notice reaches every process, all save the same step."""
  address = f"127.0.0.1:{portpicker.pick_unused_port()}"
  # Two epochs of 50 steps, a metrics line every step.
  commands = [[sys.executable, "-m", "attnlm_jax.main",
               *tiny_config.flags(train__log_every_steps=1), f"--workdir={tmp_path}",
               f"--coordinator_address={address}", "--num_processes=2", f"--process_id={i}"]
              for i in range(2)]
  processes = [subprocess.Popen(c, cwd=tiny_config.REPO, env=_env(1), text=True,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
               for c in commands]
  try:
    logged = lambda: [json.loads(l)["step"] for l in
                      (tmp_path / "metrics.jsonl").read_text().splitlines()[1:]]
    deadline = time.monotonic() + TIMEOUT
    while not ((tmp_path / "metrics.jsonl").exists() and len(logged()) >= 30):
      assert time.monotonic() < deadline and all(p.poll() is None for p in processes)
      time.sleep(0.01)
    processes[1].send_signal(signal.SIGTERM)
    lines = [p.communicate(timeout=TIMEOUT)[1].strip().splitlines()[-1] for p in processes]
  finally:
    for process in processes:
      process.kill()
  assert [p.returncode for p in processes] == [143, 143], lines
  assert lines[0] == lines[1] and lines[0].startswith("stopped by SIGTERM at step "), lines
  step = int(lines[0].split()[5])
  ckpt = checkpoints.Checkpoints(epath.Path(tmp_path), read_only=True)
  assert 30 <= step < 100 and ckpt.latest_step() == step
  ckpt.close()


def _metrics(workdir) -> list[dict]:
  return [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]


def test_two_processes_train_the_same_parameters_as_one(runs):
  two, one = runs
  assert jax.local_device_count() == 2, "tests/conftest.py sets 2 host devices"
  for workdir in (two, one):
    start = _metrics(workdir)[0]
    assert start["event"] == "start" and start["devices"] == 2
  models = [evaluate.load(workdir) for workdir in (two, one)]  # Restored in this process.
  assert models[0].step == models[1].step == 13
  for a, b in zip(jax.tree.leaves(models[0].params), jax.tree.leaves(models[1].params)):
    np.testing.assert_allclose(a, b, atol=1e-5)
  losses = [[m["train_loss"] for m in _metrics(w) if "train_loss" in m] for w in (two, one)]
  assert len(losses[0]) == 2
  np.testing.assert_allclose(losses[0], losses[1], rtol=1e-5)


def test_only_process_0_writes_logs(runs):
  two, _ = runs
  records = _metrics(two)
  assert [r.get("event") for r in records].count("start") == 1
  assert [r["step"] for r in records if "train_loss" in r] == [5, 10]
  assert len(list((two / "tensorboard").iterdir())) == 1


def test_two_process_checkpoints_restore_in_one_process(runs):
  two, one = runs
  # The step checkpoint (step 10) and the epoch end (step 13), written by both processes.
  ckpt = checkpoints.Checkpoints(epath.Path(two), read_only=True)
  assert (ckpt.latest_step(), ckpt.best_step()) == (13, 13)
  model = evaluate.load(two)
  state, meta = ckpt.restore(13, steps.initial_state(model.config, model.params))
  ckpt.close()
  assert int(state["step"]) == 13 and meta["epoch_done"]
  want = [m for m in _metrics(one) if "final_valid_perplexity" in m][0]
  got = evaluate.evaluate(model, "valid")
  assert got["perplexity"] == pytest.approx(want["final_valid_perplexity"], rel=1e-5)


def test_processes_read_their_rows_of_each_global_batch():
  config = tiny_config.config(data__batch_size=400, data__bucket=True)
  data = pipeline.load(config.data)
  batches = 0
  for whole, *parts in zip(data.train_iterator(1), data.train_iterator(1, 0, 2),
                           data.train_iterator(1, 1, 2), strict=True):
    batches += 1
    for key in whole:
      np.testing.assert_array_equal(np.concatenate([p[key] for p in parts]), whole[key])
  assert batches == data.num_train_batches() > 1
  for whole, *parts in zip(data.eval_batches("valid", 1000),
                           *[data.eval_batches("valid", 1000, i, 4) for i in range(4)],
                           strict=True):
    assert all(p["inputs"].shape == (250, whole["inputs"].shape[1]) for p in parts)
    assert parts[0].keys() == whole.keys()
    for key in whole:
      np.testing.assert_array_equal(np.concatenate([p[key] for p in parts]), whole[key])


@pytest.mark.parametrize("args, message", [
    (("127.0.0.1:1234", 2, None), "--process_id missing"),
    ((None, 2, None), "--coordinator_address, --process_id missing"),
    (("127.0.0.1:1234", 2, 2), "--process_id=2 is out of range: use 0 to 1"),
])
def test_incomplete_process_flags_are_refused(args, message):
  with pytest.raises(distributed.DistributedError, match=message):
    distributed.initialize(*args)


@pytest.mark.parametrize("address", ["127.0.0.1", "127.0.0.1:port", ":1234", "host:0"])
def test_an_address_that_is_not_host_and_port_is_refused(address):
  with pytest.raises(distributed.DistributedError, match=re.escape(
      f"--coordinator_address={address} is not HOST:PORT: give process 0's host")):
    distributed.initialize(address, 2, 0)


def test_a_coordinator_that_never_answers_is_one_line_not_an_abort(monkeypatch):
  """A process other than 0 waits for the coordinator; JAX itself would abort the process
  with a stack trace once its own wait ran out."""
  monkeypatch.setattr(distributed, "COORDINATOR_WAIT_S", 0.0)
  port = portpicker.pick_unused_port()   # nothing listens there
  with pytest.raises(distributed.DistributedError, match=re.escape(
      f"no coordinator at --coordinator_address=127.0.0.1:{port} after 0 s (Connection "
      "refused): start process 0, which serves it")):
    distributed.initialize(f"127.0.0.1:{port}", 2, 1)


def test_batch_that_does_not_split_over_processes_is_refused():
  with pytest.raises(pipeline.CorpusError, match="400 rows does not split over 3 processes"):
    pipeline.process_rows(400, 0, 3)


def test_remote_workdir_logs_are_written_locally_then_copied(tmp_path, monkeypatch):
  monkeypatch.setattr(logging_utils, "is_remote", lambda path: True)
  metrics = tmp_path / logging_utils.METRICS_FILE

  def steps() -> list[int]:
    return [json.loads(line)["step"] for line in metrics.read_text().splitlines()]

  monkeypatch.setattr(logging_utils, "MIRROR_SECONDS", 0.0)
  first = logging_utils.MetricWriter(epath.Path(tmp_path))
  first.write_scalars(1, {"train_loss": 1.0})
  assert steps() == [1]                   # Copied at once: the interval is 0 s.
  first.close()
  monkeypatch.setattr(logging_utils, "MIRROR_SECONDS", 3600.0)
  resumed = logging_utils.MetricWriter(epath.Path(tmp_path))
  resumed.write_scalars(2, {"train_loss": 2.0})
  assert steps() == [1]                   # Not copied yet.
  resumed.close()
  assert steps() == [1, 2]                # Appended to the copied-in file, copied at close.
  assert list((tmp_path / logging_utils.TENSORBOARD_DIR).glob("events.out.tfevents.*"))
