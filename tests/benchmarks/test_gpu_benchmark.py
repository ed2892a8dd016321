"""benchmarks.gpu, run on the CPU with every size shrunk (`--tiny`): each part's lines, the
peer's loss beside the project's."""

import importlib.util
import json
import subprocess
import sys
import time

import jax
import pytest

from attnlm_jax import models
from benchmarks import gpu
import tiny_config

HAS_TORCH = importlib.util.find_spec("torch") is not None
COMMAND = ["-m", "benchmarks.gpu", "--tiny"]


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
  """(seconds the command took, {part: its records}, command.json) of one `--tiny` run."""
  out = tmp_path_factory.mktemp("gpu_benchmark")
  start = time.monotonic()
  done = subprocess.run([sys.executable, *COMMAND, f"--out={out}"], cwd=tiny_config.REPO,
                        capture_output=True, text=True, check=False, timeout=300)
  seconds = time.monotonic() - start
  assert done.returncode == 0, done.stderr[-3000:]
  records = {part: [json.loads(line) for line in (out / f"{part}.jsonl").read_text().splitlines()]
             for part in gpu.PARTS}
  return seconds, records, json.loads((out / "command.json").read_text())


def test_the_header_names_the_parts_and_the_command(tiny_run):
  seconds, _, header = tiny_run
  assert 0 < header["seconds"] <= seconds
  assert header["parts"] == list(gpu.PARTS)
  assert header["command"].startswith("python -m benchmarks.gpu --tiny --out=")


def test_every_line_names_its_part_sizes_device_versions_and_command(tiny_run):
  _, records, _ = tiny_run
  for part, lines in records.items():
    assert lines, part
    for record in lines:
      assert record["part"] == part
      assert record["sizes"] == {"vocab_size": 101, "hidden_size": 16, "num_layers": 2,
                                 "time_steps": 8, "batch_sizes": [4]}
      assert record["device"]["jax"] and (record["device"]["torch"] or not HAS_TORCH)
      assert {"jax", "jaxlib"} <= set(record["versions"])
      assert ("torch" in record["versions"]) == HAS_TORCH
      assert record["command"].startswith("python -m benchmarks.gpu --tiny --out=")
      assert record["precision"]


def test_steps_of_both_sides_at_every_score_batch_and_precision(tiny_run):
  _, records, _ = tiny_run
  lines = records["step"]
  assert sorted((r["score"], r["batch_size"], r["precision"]) for r in lines) == sorted(
      (s, b, p) for s in gpu.SCORES for b in (4,) for p in gpu.PRECISIONS)
  for record in lines:
    jax_side, torch_side = record["sides"]["jax"], record["sides"]["torch"]
    assert jax_side["precision"] == gpu.JAX_PRECISION[record["precision"]]
    assert torch_side["precision"] == gpu.TORCH_PRECISION[record["precision"]]
    assert jax_side["ms_per_step"] > 0
    assert jax_side["tokens_per_s"] == pytest.approx(
        record["batch_size"] * 8 / jax_side["ms_per_step"] * 1e3, rel=1e-2)
    assert jax_side["epoch_seconds"] == pytest.approx(
        gpu.PTB_EPOCH_TOKENS / jax_side["tokens_per_s"], rel=1e-2)
    if HAS_TORCH and "unavailable" in torch_side:
      # oneDNN has no bfloat16 LSTM on some CPUs; every other precision runs on both sides.
      assert record["precision"] == "bfloat16", torch_side["unavailable"]
      assert "LSTM" in torch_side["unavailable"]
    elif HAS_TORCH:
      assert torch_side["ms_per_step"] > 0
      assert record["ratio_jax_over_torch"] == pytest.approx(
          jax_side["tokens_per_s"] / torch_side["tokens_per_s"], rel=1e-2)
    else:
      assert "torch is not installed" in torch_side["unavailable"]


def test_the_peer_computes_the_same_loss_at_float32(tiny_run):
  """On the same batch at the same (trained) parameters both sides' float32 losses agree as
  in test_torch_peer.py. The parameters are the JAX step's after its timed steps, not its
  initial ones: the batch's loss differs from the initial parameters' (by 0.01 to 0.8 in the
  tiny run; the ids are random, so it stays near uniform) far past float noise."""
  _, records, _ = tiny_run
  checked = {r["score"]: r["loss_check"] for r in records["step"] if r["precision"] == "float32"}
  assert sorted(checked) == sorted(gpu.SCORES)
  assert all("loss_check" not in r for r in records["step"] if r["precision"] != "float32")
  first_batch = gpu.random_batches(gpu.TINY, 4, 1)[0]   # the same ids whatever the count
  for score, check in checked.items():
    config = gpu.ptb_config(score, "float32", gpu.TINY, 4)
    untrained = gpu.jax_loss(config, models.init(jax.random.key(0), config.model), first_batch)
    assert check["jax"] > 0 and abs(check["jax"] - untrained) > 1e-3, (score, untrained)
    if HAS_TORCH:
      assert check["torch"] == pytest.approx(check["jax"], rel=1e-5)


def test_the_recurrence_at_every_unroll_and_cudnn_recorded(tiny_run):
  _, records, _ = tiny_run
  for batch_size in (4,):
    lines = [r for r in records["recurrence"] if r["batch_size"] == batch_size]
    scans = {r["unroll"]: r for r in lines if r["implementation"].endswith("scan_layer")}
    assert sorted(scans) == list(gpu.UNROLLS)
    assert all(r["us_per_time_step"] > 0 for r in scans.values())
    cudnn = [r for r in lines if r["implementation"] == "jax.experimental.rnn.lstm"]
    assert len(cudnn) == 1
    assert "unavailable" in cudnn[0] or cudnn[0]["us_per_time_step"] > 0


def test_compile_seconds_once_on_a_cpu(tiny_run):
  _, records, _ = tiny_run
  (record,) = records["compile"]
  assert record["autotuner"].startswith("irrelevant on cpu")
  assert record["compile_seconds"] > 0 and record["first_step_seconds"] > 0


def test_without_torch_the_peer_is_recorded_unavailable(monkeypatch):
  monkeypatch.setitem(sys.modules, "torch", None)   # `import torch` raises ImportError
  torch_or_reason = gpu.load_torch()
  assert torch_or_reason[0] is None
  record = gpu.step_record("none", 4, "float32", gpu.TINY, 2, torch_or_reason)
  assert record["sides"]["torch"]["unavailable"].startswith("torch is not installed")
  assert record["sides"]["jax"]["ms_per_step"] > 0
  assert set(record["loss_check"]) == {"what", "jax"}
