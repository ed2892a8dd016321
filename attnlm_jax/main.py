"""The command line: train, evaluate, score, sample, analyze, and reproduce the papers' tables.

    python -m attnlm_jax.main --config=configs/ptb.py:score=single --workdir=DIR
    python -m attnlm_jax.main --mode=evaluate --workdir=DIR --split=test [--cache=2000]
    python -m attnlm_jax.main --mode=reproduce --table=salton_ptb --workdir=DIR [--rows=single]

`MODES` maps each --mode to its function; the work is done in the subpackages. Local paths
are made absolute once, here. A mistake in the input ends with one `error: ...` line and
status 1; a signal during training saves the run and ends it with status 128 + the signal's
number (rerunning resumes). The other modes and flags: `--helpfull`, and the README.
"""

import os
import sys

from absl import app
from absl import flags
from etils import epath
from ml_collections import config_flags

from attnlm_jax.common import config_files
from attnlm_jax.common import errors
from attnlm_jax.common import json_io
from attnlm_jax.common import logging_utils
from attnlm_jax.common import text_files
from attnlm_jax import data as data_lib
from attnlm_jax.data import locations
from attnlm_jax.evaluation import analysis
from attnlm_jax.evaluation import ensemble
from attnlm_jax.evaluation import evaluate
from attnlm_jax.evaluation import rescoring
from attnlm_jax.experiments import runner
from attnlm_jax.experiments import tables
from attnlm_jax.experiments import testtime_page
from attnlm_jax import models
from attnlm_jax.tagger import trainer as tagger_trainer
from attnlm_jax.testtime import cache
from attnlm_jax.testtime import dynamic_eval
from attnlm_jax.testtime import grid_search
from attnlm_jax.training import distributed
from attnlm_jax.training import preemption
from attnlm_jax.training import train

config_flags.DEFINE_config_file(
    "config", None, "Config file, e.g. configs/ptb.py or configs/ptb.py:score=combined; "
    "optional outside training (default: the workdir's config.json).", lock_config=True)
flags.DEFINE_string("workdir", None, "Directory of checkpoints and logs (local or gs://).")
flags.DEFINE_enum("mode", "train",
                  ["train", "evaluate", "score", "generate", "analyze", "train_tagger",
                   "reproduce", "rescore", "testtime"],
                  "What to do (train_tagger: the POS tagger of configs/tagger.py; reproduce: "
                  "train and report a paper's table, see --table; rescore: re-rank n-best "
                  "lists; testtime: the cache and dynamic-evaluation page of a table, "
                  "docs/testtime.md).")
flags.DEFINE_enum("split", "valid", ["train", "valid", "test"], "Split to evaluate.")
flags.DEFINE_string("input", None, "score: text file, one sentence per line; rescore: the "
                    "n-best file, or a Kaldi n-best directory (docs/testtime.md).")
flags.DEFINE_string("output", None, "score, rescore: JSON-lines output file (default: stdout; "
                    "its directory is created).")
flags.DEFINE_string("prompt", "", "generate: words to continue.")
flags.DEFINE_integer("num_tokens", 50, "generate: number of words to sample (at least 1).",
                     lower_bound=1)
flags.DEFINE_float("temperature", 1.0, "generate: softmax temperature (0: greedy).",
                   lower_bound=0.0)
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
flags.DEFINE_string("table", None, "reproduce: the table to reproduce "
                    f"({', '.join(tables.TABLES)}; docs/reproduce.md); its rows train in "
                    "WORKDIR/<row>; testtime: the table whose rows to evaluate.")
flags.DEFINE_list("rows", [], "reproduce, testtime: only these rows of --table (default: "
                  "all).")
flags.DEFINE_bool("dry_run", False, "reproduce: print the plan (rows, configs, estimated "
                  "tokens) and train nothing.")
flags.DEFINE_bool("pages_only", False, "reproduce: train nothing; rewrite results.json, "
                  "results.md and curves.png from what WORKDIR holds (rows still training "
                  "shown running).")
flags.DEFINE_integer("cache", 0, "evaluate: add a neural cache of this many (hidden state, "
                     "next word) pairs (0: none); testtime: the cache size (0: 2000).",
                     lower_bound=0)
flags.DEFINE_float("cache_theta", None, "evaluate --cache: theta (default: chosen on valid).")
flags.DEFINE_float("cache_lambda", None, "evaluate --cache: lambda (default: chosen on "
                   "valid).")
flags.DEFINE_enum("cache_states", "lstm", models.HIDDEN_STATES, "evaluate --cache: the "
                  "hidden states the cache keeps and queries: lstm (h_t, the last LSTM "
                  "layer's output) or head (h'_t, the attentive models' output layer, what "
                  "the softmax reads).")
flags.DEFINE_enum("dynamic", None, dynamic_eval.METHODS, "evaluate: dynamic evaluation with "
                  "this update rule.")
flags.DEFINE_float("dynamic_lr", None, "evaluate --dynamic: learning rate (default: chosen on "
                   "valid).")
flags.DEFINE_float("dynamic_decay", None, "evaluate --dynamic: decay towards the trained "
                   "parameters (default: chosen on valid).")
flags.DEFINE_integer("dynamic_window", 1, "evaluate --dynamic, testtime: sentences (or "
                     "document spans) per window of dynamic evaluation; stream-protocol "
                     "windows are max_len tokens.", lower_bound=1)
flags.DEFINE_integer("grid_extensions", grid_search.EXTENSIONS, "evaluate --cache/--dynamic, "
                     "testtime: steps each grid search may take past an edge its best point "
                     "lies on (0: the grid alone; docs/testtime.md).", lower_bound=0)
flags.DEFINE_string("references", None, "rescore: reference file, 'utterance-id<TAB>text' "
                    "(or Kaldi's 'utterance-id text') per line; prints the word error rate "
                    "before and after.")
flags.DEFINE_string("lm_weight", "1.0", "rescore: weight of log p_LM, or 'auto' (the weight "
                    "with the lowest word error rate on --references).")
flags.DEFINE_float("word_penalty", 0.0, "rescore: weight of each hypothesis's word count.")
flags.DEFINE_float("acoustic_scale", rescoring.ACOUSTIC_SCALE, "rescore, a Kaldi n-best "
                   "directory as --input: the first-pass score is -(acoustic_scale * ac_cost "
                   "+ lm_cost).", lower_bound=0)
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

# Flags and config fields that hold local paths (made absolute at the start).
PATH_FLAGS = ("workdir", "input", "output", "references")
PATH_LIST_FLAGS = ("workdirs", "probes")
CONFIG_PATHS = ("data_dir", "cache_dir", "tagger_dir", "treebank_dir", "lm_data_dir")
# What the modes that train need given, and the modes over a published table.
CONFIG_HINT = "--config=configs/NAME.py"
TABLE_HINT = "--table=NAME (docs/reproduce.md lists the tables)"
# The modes over a table's rows, each row with its own config -> how to run one row with another.
TABLE_MODES = {"reproduce": "train one row alone, with your overrides, by its command "
                            "(--dry_run prints it; docs/reproduce.md)",
               "testtime": "evaluate one row alone with --mode=evaluate --workdir=WORKDIR/ROW "
                           "(docs/testtime.md)"}
# A data field only the tagger's config (configs/tagger.py) has: it tells the two kinds apart.
TAGGER_FIELD = "drop_punctuation"
# Flags that act only in --mode=evaluate beside another flag -> that flag and its values.
ACTS_WITH = {"cache_theta": ("cache", "SIZE"), "cache_lambda": ("cache", "SIZE"),
             "cache_states": ("cache", "SIZE"), "dynamic_lr": ("dynamic", "sgd|rms"),
             "dynamic_decay": ("dynamic", "sgd|rms"), "weights": ("workdirs", "DIR1,DIR2")}


def _fail(message: str) -> None:
  """Prints one error line and exits with status 1."""
  print(f"error: {' '.join(str(message).split())}", file=sys.stderr)
  sys.exit(1)


def _parse_flags(argv: list[str]) -> list[str]:
  """Parses the flags and loads the --config file; a bad flag, config file or override is a
  one-line error (`config_files.load_error`)."""
  try:
    rest = FLAGS(argv)
    if FLAGS["config"].value is not None:
      FLAGS.config.get("seed")  # A file that failed to load raises on first access.
    return rest
  except config_files.LOAD_ERRORS as e:
    _fail(config_files.load_error(e, argv))


def _resolve_paths() -> None:
  """Makes the path flags and the config's directories absolute (from the current
  directory), before anything reads or records them."""
  for name in PATH_FLAGS:
    if FLAGS[name].value:
      FLAGS[name].value = locations.absolute(FLAGS[name].value)
  for name in PATH_LIST_FLAGS:
    FLAGS[name].value = [locations.absolute(p) for p in FLAGS[name].value]
  config = FLAGS.config
  if config is not None and "data" in config:
    for field in CONFIG_PATHS:
      if isinstance(config.data.get(field), str):
        config.data[field] = locations.absolute(config.data[field])


def _need(value, mode: str, flag: str) -> None:
  """UserError unless `value` was given: --mode=`mode` needs `flag`."""
  if value is None:
    raise errors.UserError(f"--mode={mode} needs {flag}")


def _check_flags() -> None:
  """UserError for flags that do not go together: a --config that --mode would ignore or
  cannot read, a flag without the one it acts with, a --workdir at or below a file."""
  config = FLAGS.config
  if config is not None:
    if FLAGS.mode in TABLE_MODES:
      raise errors.UserError(f"--mode={FLAGS.mode} runs each row of --table with the row's "
                             "own config, not --config: drop --config and --config.*, or "
                             f"{TABLE_MODES[FLAGS.mode]}")
    name = FLAGS["config"].config_filename
    tagger = TAGGER_FIELD in config.get("data", {})
    if tagger and FLAGS.mode != "train_tagger":
      raise errors.UserError(f"--config={name} is the POS tagger's config, for "
                             f"--mode=train_tagger: --mode={FLAGS.mode} takes a language "
                             "model's, e.g. --config=configs/ptb.py")
    if not tagger and FLAGS.mode == "train_tagger":
      raise errors.UserError(f"--mode=train_tagger trains the POS tagger of "
                             f"--config=configs/tagger.py: --config={name} is a language "
                             "model's config, for --mode=train")
  for flag, (companion, values) in ACTS_WITH.items():
    if FLAGS[flag].present and not (FLAGS.mode == "evaluate" and FLAGS[companion].value):
      raise errors.UserError(f"--{flag} acts only with --mode=evaluate --{companion}={values}: "
                             f"add them, or drop --{flag}")
  if FLAGS.workdir and not logging_utils.is_remote(FLAGS.workdir):
    path = epath.Path(FLAGS.workdir)
    existing = next(p for p in (path, *path.parents) if os.path.exists(p))
    if not os.path.isdir(existing):
      raise errors.UserError(f"--workdir={path}: {existing} is a file, not a directory: "
                             "name a directory (or one to create)")


def _train(config) -> dict:
  """--mode=train: trains (or resumes) a run in --workdir."""
  _need(config, "train", CONFIG_HINT)
  return train.summary(train.train_and_evaluate(config, FLAGS.workdir), FLAGS.workdir)


def _train_tagger(config) -> dict:
  """--mode=train_tagger: the POS tagger of configs/tagger.py."""
  _need(config, "train_tagger", CONFIG_HINT)
  return tagger_trainer.train_tagger(config, FLAGS.workdir)


def _evaluate(config) -> dict:
  """--mode=evaluate: a split's perplexities, with a neural cache, dynamic evaluation, or of
  an interpolation of --workdirs."""
  if FLAGS.cache and FLAGS.dynamic:
    raise errors.UserError("--cache and --dynamic are two methods: give one of them")
  if FLAGS.workdirs:
    if FLAGS.cache or FLAGS.dynamic:
      raise errors.UserError("--cache and --dynamic evaluate one --workdir, not --workdirs")
    if config is not None:
      raise errors.UserError("--config cannot be combined with --workdirs: each run is "
                             "evaluated with the config.json of its workdir")
    return ensemble.interpolate(FLAGS.workdirs, FLAGS.split, FLAGS.weights or None)
  model = evaluate.load(FLAGS.workdir, config)
  if FLAGS.cache:
    return cache.evaluate_split(model, FLAGS.split, FLAGS.cache, FLAGS.cache_theta,
                                FLAGS.cache_lambda, FLAGS.grid_extensions, FLAGS.cache_states)
  if FLAGS.dynamic:
    return dynamic_eval.evaluate_split(model, FLAGS.split, FLAGS.dynamic, FLAGS.dynamic_lr,
                                       FLAGS.dynamic_decay, FLAGS.dynamic_window,
                                       FLAGS.grid_extensions)
  return evaluate.evaluate(model, FLAGS.split)


def _score(config) -> None:
  """--mode=score: one JSON line per sentence of --input, to --output or stdout."""
  if not FLAGS.input:
    raise errors.UserError("--mode=score needs --input=FILE (one sentence per line)")
  path = epath.Path(FLAGS.input)
  if not path.is_file():
    raise errors.UserError(f"--input={path} not found")
  lines = text_files.read_lines(path)
  if not any(line.strip() for line in lines):
    raise errors.UserError(f"--input={path} has no sentence to score (every line is blank): "
                           "give one sentence per line")
  json_io.check_output(FLAGS.output, [("--input", path)])
  model = evaluate.load(FLAGS.workdir, config)
  json_io.write_records(evaluate.score(model, lines), FLAGS.output)


def _generate(config) -> None:
  """--mode=generate: the prompt and its sampled continuation, one line."""
  model = evaluate.load(FLAGS.workdir, config)
  unknown = model.vocab.unknown_words(FLAGS.prompt.split())
  if unknown:
    print(f"note: not in the vocabulary, read as {data_lib.UNK}: {' '.join(unknown)}",
          file=sys.stderr)
  words = evaluate.generate(model, FLAGS.prompt, FLAGS.num_tokens, FLAGS.temperature,
                            FLAGS.seed)
  print(" ".join(FLAGS.prompt.split() + words))


def _analyze(config) -> dict:
  """--mode=analyze: attention heatmaps, smoothing, the agreement probe, surprisal."""
  return analysis.run(config, FLAGS.workdirs or [FLAGS.workdir],
                      epath.Path(FLAGS.workdir) / analysis.ANALYSIS_DIR,
                      sentences=FLAGS.sentences, split=FLAGS.split, probe_files=FLAGS.probes)


def _reproduce(config) -> dict:
  """--mode=reproduce: trains a published table's rows and writes its pages."""
  del config  # Each row has its own (`_check_flags` refuses --config).
  _need(FLAGS.table, "reproduce", TABLE_HINT)
  return runner.run(FLAGS.table, FLAGS.workdir, rows=FLAGS.rows, dry_run=FLAGS.dry_run,
                    pages_only=FLAGS.pages_only)


def _testtime(config) -> dict:
  """--mode=testtime: the cache and dynamic-evaluation page of a table's rows."""
  del config  # Each row has its own (`_check_flags` refuses --config).
  _need(FLAGS.table, "testtime", TABLE_HINT)
  return testtime_page.run(FLAGS.table, FLAGS.workdir, rows=FLAGS.rows,
                           cache_size=FLAGS.cache or testtime_page.CACHE_SIZE,
                           dynamic_window=FLAGS.dynamic_window,
                           grid_extensions=FLAGS.grid_extensions)


def _rescore(config) -> dict:
  """--mode=rescore: re-ranks n-best lists with the LM."""
  return rescoring.run(FLAGS.workdir, FLAGS.input, FLAGS.references, FLAGS.output,
                       FLAGS.lm_weight, FLAGS.word_penalty, config, FLAGS.acoustic_scale)


# What each --mode runs, given the --config (None when not given): the summary `main` prints
# as one JSON line, or None for the modes that write their own output.
MODES = {"train": _train, "evaluate": _evaluate, "score": _score, "generate": _generate,
         "analyze": _analyze, "train_tagger": _train_tagger, "reproduce": _reproduce,
         "rescore": _rescore, "testtime": _testtime}


def main(argv: list[str]) -> None:
  """Runs --mode; user errors end the process with one line and status 1, a run stopped by a
  signal with one line and 128 + the signal's number."""
  if len(argv) > 1:
    _fail(f"unexpected arguments: {' '.join(argv[1:])}")
  logging_utils.quiet_libraries()
  _resolve_paths()
  try:
    _check_flags()
    distributed.initialize(FLAGS.coordinator_address, FLAGS.num_processes, FLAGS.process_id)
    summary = MODES[FLAGS.mode](FLAGS.config)
    if summary is not None:
      print(json_io.dumps(summary))
  except errors.UserError as e:
    _fail(e)
  except preemption.Stopped as e:  # Saved: one line, and the signal's conventional status.
    print(e, file=sys.stderr)
    sys.exit(e.exit_status)


if __name__ == "__main__":
  app.run(main, flags_parser=_parse_flags)
