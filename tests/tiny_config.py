"""What the tests share: a tiny demo config (seconds per run on a CPU), an untrained model of
it, and helpers that run the command line."""

import json
import pathlib
import runpy
import subprocess
import sys

import jax

from attnlm_jax import data as data_lib
from attnlm_jax.evaluation import evaluate
from attnlm_jax import models

REPO = pathlib.Path(__file__).resolve().parents[1]

# The committed results pages (docs/results/<table>/), which the tests rewrite from their files.
COMMITTED_RESULTS = REPO / "docs" / "results"

# Overrides of configs/demo.py: a 1 x 16 model, 50 batches of rows cut to 10 tokens per
# epoch, 2 epochs.
OVERRIDES = {
    "model.hidden_size": 16,
    "data.batch_size": 400,
    "data.max_len": 10,
    "data.eval_batch_size": 1000,
    "train.num_epochs": 2,
    "train.patience": 2,
    "train.save_every_steps": 20,
    "train.log_every_steps": 10,
}


def config(**overrides):
  """configs/demo.py with OVERRIDES and `overrides` ("model__score": "average" style keys)."""
  result = runpy.run_path(str(REPO / "configs" / "demo.py"))["get_config"]()
  merged = {**OVERRIDES, **{k.replace("__", "."): v for k, v in overrides.items()}}
  for key, value in merged.items():
    section, field = key.split(".")
    result[section][field] = value
  return result


def flags(**overrides) -> list[str]:
  """The same config as command-line flags for `python -m attnlm_jax.main`."""
  merged = {**OVERRIDES, **{k.replace("__", "."): v for k, v in overrides.items()}}
  return ["--config=configs/demo.py"] + [f"--config.{k}={v}" for k, v in merged.items()]


def untrained_model(**overrides) -> evaluate.TrainedModel:
  """Untrained parameters of the tiny config on the embedded corpus, drawn U(-0.5, 0.5) so
  that the hidden states differ visibly from one step to the next."""
  model_config = config(model__init_scale=0.5, **overrides)
  vocab = data_lib.load(model_config.data).vocab
  model_config.model.vocab_size = len(vocab)
  return evaluate.TrainedModel(model_config, vocab,
                               models.init(jax.random.key(0), model_config.model), 0)


def must_not_run(*args, **kwargs):
  """A stand-in for training or evaluation where a test must use saved results only."""
  raise AssertionError(f"nothing should be trained or evaluated here: {args} {kwargs}")


def run_main(*args, cwd=REPO, check: bool = True) -> subprocess.CompletedProcess:
  """`python -m attnlm_jax.main ARGS` run from `cwd` (the repository); with `check`, its exit
  status must be 0 (the assertion shows the end of its stderr)."""
  result = subprocess.run([sys.executable, "-m", "attnlm_jax.main", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=300)
  if check:
    assert result.returncode == 0, result.stderr[-3000:]
  return result


def last_json_line(module: str, *args: str) -> dict:
  """The JSON object that `python -m module args`, run from the repository, prints last."""
  out = subprocess.run([sys.executable, "-m", module, *args], cwd=REPO, capture_output=True,
                       text=True, check=True).stdout
  return json.loads(out.strip().splitlines()[-1])
