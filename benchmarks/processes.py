"""Each side as its users run it, in a process of its own: `python -m attnlm_jax.main` against
pytorch/examples' word_language_model `main.py` on the same model, alternating.

    git clone https://github.com/pytorch/examples /tmp/pytorch_examples
    python -m benchmarks.processes --examples=/tmp/pytorch_examples [--pairs=stream_650]

Each side trains `--batches` batches of its first epoch and is stopped; its rate is what it
reports itself over its log intervals after the first (this project: `tokens_per_second` in
metrics.jsonl every `LOG_EVERY` steps; main.py: ms/batch every `LOG_EVERY` batches, of
batch x bptt tokens), the median over the intervals and then over `--rounds` rounds. Also the
seconds from a process's start to its first log interval's end (imports, data, compiling and
`LOG_EVERY` batches). One JSON line per pair (`PAIRS`), with the command that gave it.
"""

import json
import os
import pathlib
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from absl import app
from absl import flags

from attnlm_jax.common import json_io
from attnlm_jax.common import logging_utils
from attnlm_jax.common import provenance
from attnlm_jax.common.errors import UserError
from attnlm_jax.data import locations
from benchmarks.shapes import SHARED_DATA

LOG_EVERY = 50
PTB_FILES = {"train.txt": "ptb.train.txt", "valid.txt": "ptb.valid.txt",
             "test.txt": "ptb.test.txt"}
# pair -> (this project's flags, main.py's flags): the same model and batches of the same
# shape. stream_650: a 2 x 650 tied LSTM on 32 streams of BPTT 35, dropout 0.5, as main.py
# reads PTB; example_recipe: main.py's defaults (2 x 200, dropout 0.2, batch 20, BPTT 35)
# with --tied; sentence_650: this project's `none` row (sentences bucketed by length) against
# main.py's streams, two protocols that differ in more than speed.
PAIRS = {
    "stream_650": (
        ["--config=configs/zaremba.py:size=medium", "--config.model.tie_embeddings=true",
         "--config.data.batch_size=32"],
        ["--emsize=650", "--nhid=650", "--nlayers=2", "--dropout=0.5", "--tied",
         "--batch_size=32", "--bptt=35"]),
    "example_recipe": (
        ["--config=configs/zaremba.py:size=small", "--config.model.tie_embeddings=true",
         "--config.model.dropout=0.2", "--config.data.batch_size=20",
         "--config.data.max_len=35"],
        ["--tied"]),
    "sentence_650": (
        ["--config=configs/ptb.py:score=none"],
        ["--emsize=650", "--nhid=650", "--nlayers=2", "--dropout=0.5", "--tied",
         "--batch_size=32", "--bptt=35"]),
}
EXAMPLES_LINE = re.compile(r"ms/batch\s+([\d.]+)")

flags.DEFINE_string("examples", None, "A checkout of github.com/pytorch/examples.")
flags.DEFINE_list("pairs", list(PAIRS), f"Which pairs to time: {', '.join(PAIRS)}.")
flags.DEFINE_integer("batches", 300, "Training batches each side runs per round.")
flags.DEFINE_integer("rounds", 2, "Alternating rounds; medians count.")
FLAGS = flags.FLAGS


def ptb_dir() -> pathlib.Path:
  """The Penn Treebank files: shared/data beside the clone, else the data root."""
  shared = SHARED_DATA / "ptb"
  return shared if shared.is_dir() else pathlib.Path(locations.corpus_dir("ptb"))


def _stop(process: subprocess.Popen) -> None:
  """Stops a side (this project's saves on SIGTERM; main.py just ends) and waits for it."""
  process.send_signal(signal.SIGTERM)
  try:
    process.wait(timeout=300)
  except subprocess.TimeoutExpired:
    process.kill()
    process.wait()


def run_attnlm(args: list[str], workdir: pathlib.Path, batches: int) -> dict:
  """This project's command line until `batches` steps are logged."""
  command = [sys.executable, "-m", "attnlm_jax.main", *args, f"--workdir={workdir}",
             f"--config.data.data_dir={ptb_dir()}", f"--config.train.log_every_steps={LOG_EVERY}",
             "--config.train.save_every_steps=0", "--config.train.num_epochs=1"]
  started = time.monotonic()
  process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  rates, first_log = [], None
  metrics = workdir / logging_utils.METRICS_FILE
  while len(rates) < batches // LOG_EVERY and process.poll() is None:
    time.sleep(1.0)
    if metrics.exists():
      rates = [r["tokens_per_second"]
               for r in json_io.read_records(metrics, UserError, "run the benchmark again")
               if "tokens_per_second" in r]
      if rates and first_log is None:
        first_log = time.monotonic() - started
  _stop(process)
  return {"rates": rates, "seconds_to_first_log": first_log}


def run_examples(args: list[str], examples: pathlib.Path, data: pathlib.Path,
                 batches: int) -> dict:
  """pytorch/examples' main.py until `batches` batches are logged."""
  batch_size = int(next((a.split("=")[1] for a in args if a.startswith("--batch_size=")), 20))
  bptt = int(next((a.split("=")[1] for a in args if a.startswith("--bptt=")), 35))
  command = [sys.executable, "-u", "main.py", f"--data={data}", "--epochs=1",
             f"--log-interval={LOG_EVERY}", f"--save={data / 'model.pt'}", *args]
  started = time.monotonic()
  process = subprocess.Popen(command, cwd=examples / "word_language_model",
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
  rates, first_log = [], None
  for line in process.stdout:
    match = EXAMPLES_LINE.search(line)
    if match:
      rates.append(batch_size * bptt * 1000.0 / float(match.group(1)))
      first_log = first_log or time.monotonic() - started
      if len(rates) >= batches // LOG_EVERY:
        break
  _stop(process)
  return {"rates": rates, "seconds_to_first_log": first_log}


def steady_rate(run: dict) -> float:
  """Tokens/s over a run's log intervals after its first (warm-up, compiling)."""
  if len(run["rates"]) < 2:
    raise RuntimeError(f"a side logged {len(run['rates'])} intervals: run more --batches")
  return statistics.median(run["rates"][1:])


def measure(pair: str, examples: pathlib.Path, batches: int, rounds: int) -> dict:
  """The pair's JSON record: each side's tokens/s and start, the medians of `rounds`."""
  ours, theirs = PAIRS[pair]
  results = {"attnlm": [], "examples": []}
  with tempfile.TemporaryDirectory() as tmp:
    data = pathlib.Path(tmp) / "ptb"
    data.mkdir()
    for name, source in PTB_FILES.items():
      (data / name).symlink_to(ptb_dir() / source)
    for index in range(rounds):
      sides = [("attnlm", lambda: run_attnlm(ours, pathlib.Path(tmp) / f"run{index}",
                                             batches)),
               ("examples", lambda: run_examples(theirs, examples, data, batches))]
      for side, run in sides if index % 2 == 0 else reversed(sides):
        results[side].append(run())
  rate = {side: statistics.median(map(steady_rate, runs)) for side, runs in results.items()}
  import torch  # pylint: disable=g-import-not-at-top  (the bench extra)
  import jax  # pylint: disable=g-import-not-at-top
  return {"pair": pair, "attnlm_args": ours, "examples_args": theirs,
          "cpu": provenance.cpu_model(), "threads": len(os.sched_getaffinity(0)),
          "versions": {"jax": jax.__version__, "torch": torch.__version__},
          "batches": batches, "rounds": rounds, "log_every": LOG_EVERY,
          "tokens_per_s": {side: round(r, 1) for side, r in rate.items()},
          "ratio_attnlm_over_examples": round(rate["attnlm"] / rate["examples"], 3),
          "seconds_to_first_log": {side: round(statistics.median(
              r["seconds_to_first_log"] for r in runs), 1) for side, runs in results.items()},
          "interval_rates": {side: [[round(x, 1) for x in r["rates"]] for r in runs]
                             for side, runs in results.items()}}


def main(argv: list[str]) -> None:
  if len(argv) > 1:
    sys.exit(f"error: unexpected arguments: {' '.join(argv[1:])}")
  examples = pathlib.Path(FLAGS.examples or "")
  if not (examples / "word_language_model" / "main.py").is_file():
    sys.exit("error: --examples must name a checkout of github.com/pytorch/examples "
             f"(no word_language_model/main.py in {examples})")
  unknown = [pair for pair in FLAGS.pairs if pair not in PAIRS]
  if unknown:
    sys.exit(f"error: unknown pair {', '.join(unknown)}: choose from {', '.join(PAIRS)}")
  for pair in FLAGS.pairs:
    record = measure(pair, examples, FLAGS.batches, FLAGS.rounds)
    record["command"] = " ".join(["python -m benchmarks.processes", *sys.argv[1:]])
    print(json.dumps(record), flush=True)


if __name__ == "__main__":
  app.run(main)
