"""Command line: train, evaluate, score or sample from an attentive LSTM language model.

    python -m attnlm_jax.main --config=configs/demo.py --workdir=/tmp/demo
    python -m attnlm_jax.main --config=configs/ptb.py:score=combined --workdir=DIR \
        --config.train.num_epochs=20
    python -m attnlm_jax.main --mode=evaluate --workdir=DIR --split=test
    python -m attnlm_jax.main --mode=score --workdir=DIR --input=FILE --output=OUT.jsonl
    python -m attnlm_jax.main --mode=generate --workdir=DIR --prompt="the company" \
        --num_tokens=30 --temperature=0.8 --seed=1
    python -m attnlm_jax.main --mode=train_tagger --config=configs/tagger.py --workdir=DIR
    python -m attnlm_jax.main --mode=evaluate --workdirs=DIR1,DIR2 --split=test \
        [--weights=0.5,0.5]
    python -m attnlm_jax.main --mode=analyze --workdir=OUT --workdirs=DIR1,DIR2 \
        --sentences="the keys to the cabinet are here"

This file is kept short; the logic lives in `train.py` and `evaluate.py`. Mistakes in the
input (flags, config, data, workdir) end with one `error: ...` line and exit status 1.
"""

import json
import sys

from absl import app
from absl import flags
from etils import epath
from ml_collections import config_flags

from attnlm_jax import analysis
from attnlm_jax import distributed
from attnlm_jax import ensemble
from attnlm_jax import errors
from attnlm_jax import evaluate
from attnlm_jax import logging_utils
from attnlm_jax import tagger
from attnlm_jax import train

config_flags.DEFINE_config_file(
    "config", None, "Config file, e.g. configs/ptb.py or configs/ptb.py:score=combined; "
    "optional outside training (default: the workdir's config.json).", lock_config=True)
flags.DEFINE_string("workdir", None, "Directory of checkpoints and logs (local or gs://).")
flags.DEFINE_enum("mode", "train",
                  ["train", "evaluate", "score", "generate", "analyze", "train_tagger"],
                  "What to do (train_tagger: the POS tagger of configs/tagger.py).")
flags.DEFINE_enum("split", "valid", ["train", "valid", "test"], "Split to evaluate.")
flags.DEFINE_string("input", None, "score: text file, one sentence per line.")
flags.DEFINE_string("output", None, "score: JSON-lines output file (default: stdout).")
flags.DEFINE_string("prompt", "", "generate: words to continue.")
flags.DEFINE_integer("num_tokens", 50, "generate: number of words to sample.")
flags.DEFINE_float("temperature", 1.0, "generate: softmax temperature (0: greedy).")
flags.DEFINE_integer("seed", 0, "generate: random seed.")
flags.DEFINE_list("weights", [], "evaluate with --workdirs: interpolation weights, one per "
                  "workdir, summing to 1 (default: fitted on the valid split by EM).")
flags.DEFINE_list("workdirs", [], "evaluate: training workdirs to interpolate (--workdir not "
                  "needed); analyze: training workdirs to compare (default: --workdir); "
                  "the files go to WORKDIR/analysis.")
flags.DEFINE_multi_string("sentences", [], "analyze: a sentence to draw (repeat the flag; "
                          "default: three sentences of --split).")
flags.DEFINE_list("probes", [], "analyze: agreement probe files, JSON lines (default: the "
                  "embedded corpus's set).")
flags.DEFINE_string("coordinator_address", None, "Multi-process runs started by hand: "
                    "HOST:PORT of process 0, with --num_processes and --process_id (on Cloud "
                    "TPU, Slurm or Open MPI leave the three unset: they are detected).")
flags.DEFINE_integer("num_processes", None, "Multi-process runs: the number of processes.")
flags.DEFINE_integer("process_id", None, "Multi-process runs: this process's index, 0 to "
                     "--num_processes - 1 (process 0 writes the logs).")
flags.register_multi_flags_validator(
    ["workdir", "workdirs", "mode"],
    lambda f: bool(f["workdir"] or (f["mode"] == "evaluate" and f["workdirs"])),
    message="--workdir is required (or --workdirs=DIR1,DIR2 with --mode=evaluate)")
FLAGS = flags.FLAGS


def _fail(message: str) -> None:
  """Prints one error line and exits with status 1."""
  print(f"error: {' '.join(str(message).split())}", file=sys.stderr)
  sys.exit(1)


def _parse_flags(argv: list[str]) -> list[str]:
  """Parses the flags; a bad flag or config override is a one-line error."""
  try:
    return FLAGS(argv)
  except flags.Error as e:
    # A config file that raised: keep the exception's own last line, not its traceback.
    message = str(e)
    if "Traceback" in message:
      message = f"{message.split(': ')[0]}: {message.strip().splitlines()[-1]}"
    _fail(message)
  except (AttributeError, KeyError) as e:
    key = str(e).strip("\"'")
    names = [a.split("=")[0] for a in argv[1:] if a.startswith("--config.")]
    name = next((n for n in names if key in n.split(".")), " ".join(names))
    _fail(f"unknown config key {name}: the config file lists the valid keys")
  except (TypeError, ValueError) as e:
    _fail(f"bad --config: {e}")


def _config():
  """The --config ConfigDict, None when not given; a file that fails to load is an error."""
  if FLAGS["config"].value is None:
    return None
  try:
    FLAGS.config.get("seed")  # Loading errors surface on first access.
  except OSError as e:
    _fail(f"cannot load --config={FLAGS['config'].config_filename}: {e.__cause__ or e}")
  return FLAGS.config


def run(mode: str) -> None:
  """Runs one mode with the parsed flags."""
  config = _config()
  if mode in ("train", "train_tagger"):
    if config is None:
      raise errors.UserError(f"--mode={mode} needs --config=configs/NAME.py")
    trainer = train.train_and_evaluate if mode == "train" else tagger.train_tagger
    trainer(config, FLAGS.workdir)
    return
  if mode == "analyze":
    summary = analysis.run(config, FLAGS.workdirs or [FLAGS.workdir],
                           epath.Path(FLAGS.workdir) / analysis.ANALYSIS_DIR,
                           sentences=FLAGS.sentences, split=FLAGS.split,
                           probe_files=FLAGS.probes)
    print(json.dumps(summary))
    return
  if mode == "evaluate" and FLAGS.workdirs:
    if config is not None:
      raise errors.UserError("--config cannot be combined with --workdirs: each run is "
                             "evaluated with the config.json of its workdir")
    print(json.dumps(ensemble.interpolate(FLAGS.workdirs, FLAGS.split, FLAGS.weights or None)))
    return
  model = evaluate.load(FLAGS.workdir, config)
  if mode == "evaluate":
    print(json.dumps(evaluate.evaluate(model, FLAGS.split)))
  elif mode == "score":
    if not FLAGS.input:
      raise errors.UserError("--mode=score needs --input=FILE (one sentence per line)")
    path = epath.Path(FLAGS.input)
    if not path.exists():
      raise errors.UserError(f"--input={path} not found")
    lines = (json.dumps(r) + "\n" for r in evaluate.score(model, path.read_text().splitlines()))
    if FLAGS.output:
      epath.Path(FLAGS.output).write_text("".join(lines))
    else:
      sys.stdout.writelines(lines)
  else:
    words = evaluate.generate(model, FLAGS.prompt, FLAGS.num_tokens, FLAGS.temperature,
                              FLAGS.seed)
    print(" ".join(FLAGS.prompt.split() + words))


def main(argv: list[str]) -> None:
  """Runs --mode; user errors end the process with one line and status 1."""
  if len(argv) > 1:
    _fail(f"unexpected arguments: {' '.join(argv[1:])}")
  logging_utils.quiet_libraries()
  try:
    distributed.initialize(FLAGS.coordinator_address, FLAGS.num_processes, FLAGS.process_id)
    run(FLAGS.mode)
  except errors.UserError as e:
    _fail(e)


if __name__ == "__main__":
  app.run(main, flags_parser=_parse_flags)
