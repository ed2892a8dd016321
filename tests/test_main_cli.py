"""The command line: evaluate / score / generate output, one-line errors, table pages."""

import hashlib
import importlib.metadata
import json
import math
import os
import shutil
import subprocess
import sys

import pytest

from attnlm_jax.common import provenance
from attnlm_jax.evaluation import analysis
from attnlm_jax.evaluation import evaluate
from attnlm_jax.evaluation import probes
import tiny_config


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
  """A workdir trained for one epoch with the tiny config."""
  path = tmp_path_factory.mktemp("run")
  tiny_config.run_main(*tiny_config.flags(train__num_epochs=1), f"--workdir={path}")
  return path


@pytest.fixture(scope="module")
def valid_result(workdir):
  result = tiny_config.run_main("--mode=evaluate", f"--workdir={workdir}")
  return json.loads(result.stdout.splitlines()[-1])


def _snapshot(path) -> dict:
  """Hash of every file under `path`, to show nothing was written."""
  return {str(p): hashlib.sha256(p.read_bytes()).hexdigest()
          for p in sorted(path.rglob("*")) if p.is_file()}


def test_the_command_line_starts_without_matplotlib():
  """matplotlib loads with the first figure, not with the command line: about half a second of
  every command's start (`attnlm_jax/common/figures.py`)."""
  loaded = subprocess.run(
      [sys.executable, "-c", "import sys, attnlm_jax.main; print('matplotlib' in sys.modules)"],
      cwd=tiny_config.REPO, capture_output=True, text=True, check=True).stdout.strip()
  assert loaded == "False"


def test_the_start_record_says_where_the_run_trained(workdir):
  start = json.loads((workdir / "metrics.jsonl").read_text().splitlines()[0])
  assert start["event"] == "start"
  assert (start["platform"], start["devices"]) == ("cpu", 2)   # tests/conftest.py's devices
  assert start["host_cpus"] == len(os.sched_getaffinity(0))
  with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:   # the model the kernel reports
    text = cpuinfo.read()
  assert f"model name\t: {start['cpu_model']}\n" in text
  flags = set(next(l for l in text.splitlines() if l.startswith("flags")).split(":")[1].split())
  features = start["cpu_features"].split()
  assert features == sorted(features) and set(features) <= flags
  assert ("avx2" in features) == ("avx2" in flags) and "fpu" not in features


def _git(*args) -> str:
  return subprocess.run(["git", "-C", str(tiny_config.REPO), *args], capture_output=True,
                        text=True, check=True, timeout=60).stdout.strip()


def test_the_start_record_names_the_code_that_trained(workdir):
  """The checkout's commit, marked when its tracked files had changes: a rerun is bit for bit
  only with the same code (docs/reproduce.md: the dropout masks' change of 2026-11-27)."""
  if shutil.which("git") is None or not (tiny_config.REPO / ".git").exists():
    pytest.skip("needs a git checkout of the repository")
  start = json.loads((workdir / "metrics.jsonl").read_text().splitlines()[0])
  commit, _, mark = start["code_version"].partition("+")
  assert commit == _git("rev-parse", "HEAD")
  assert mark == ("changes" if _git("status", "--porcelain", "--untracked-files=no", "--",
                                    *provenance.CODE_PATHS) else "")


def test_the_start_record_names_the_libraries_that_trained(workdir):
  """A run on another machine (a GPU image's JAX) says which JAX, Flax, Optax and Orbax ran."""
  start = json.loads((workdir / "metrics.jsonl").read_text().splitlines()[0])
  assert start["versions"]["jax"] == importlib.metadata.version("jax")
  assert set(start["versions"]) == set(provenance.LIBRARIES)


def test_a_change_to_the_code_marks_the_code_version_and_one_to_the_docs_does_not(tmp_path):
  """In a checkout of its own: committed, then a README edit (no mark), then a code edit."""
  if shutil.which("git") is None:
    pytest.skip("needs git")
  shutil.copytree(tiny_config.REPO / "attnlm_jax", tmp_path / "attnlm_jax")
  (tmp_path / "README.md").write_text("a checkout\n")
  git = lambda *args: subprocess.run(
      ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t", *args],
      capture_output=True, text=True, check=True, timeout=60).stdout.strip()
  git("init", "-q")
  git("add", ".")
  git("commit", "-qm", "code")
  version = lambda: subprocess.run(
      [sys.executable, "-c", "from attnlm_jax.common import provenance; "
       "print(provenance.code_version())"],
      cwd=tmp_path, capture_output=True, text=True, timeout=120, check=True).stdout.strip()
  head = git("rev-parse", "HEAD")
  assert version() == head
  (tmp_path / "README.md").write_text("a checkout, its docs edited\n")
  assert version() == head
  with (tmp_path / "attnlm_jax" / "models" / "scores.py").open("a") as source:
    source.write("# an edit\n")
  assert version() == head + "+changes"


def test_the_code_version_outside_a_checkout_is_the_installed_package(tmp_path):
  """A copy of the package outside any git checkout (an installed wheel) names its version."""
  shutil.copytree(tiny_config.REPO / "attnlm_jax", tmp_path / "attnlm_jax")
  done = subprocess.run([sys.executable, "-c", "from attnlm_jax.common import provenance; "
                         "print(provenance.__file__); print(provenance.code_version())"],
                        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=True)
  imported_from, version = done.stdout.split()
  assert imported_from == str(tmp_path / "attnlm_jax" / "common" / "provenance.py")
  assert version == f"attnlm_jax=={importlib.metadata.version('attnlm_jax')}"


@pytest.mark.skipif(shutil.which("taskset") is None, reason="needs taskset (util-linux)")
def test_host_cpus_are_those_the_process_may_use():
  """They size XLA's CPU thread pool, and with it the order of float32 sums: one CPU under
  `taskset -c 0`, whatever the host has."""
  done = subprocess.run(["taskset", "-c", "0", sys.executable, "-c",
                         "from attnlm_jax.common import provenance; "
                         "print(provenance.host_cpus())"],
                        capture_output=True, text=True, timeout=120, check=True)
  assert done.stdout.split() == ["1"]


def test_evaluate_prints_one_json_object_last(valid_result):
  assert {"split", "perplexity", "perplexity_paper_convention", "tokens", "sentences",
          "step"} <= valid_result.keys()
  assert valid_result["split"] == "valid"
  assert valid_result["sentences"] == 2000          # the embedded valid split
  assert valid_result["perplexity"] == pytest.approx(
      math.exp(valid_result["nll"] / valid_result["tokens"]))
  assert 1 < valid_result["perplexity_paper_convention"] < valid_result["perplexity"]


def test_evaluate_with_a_config_of_another_network_is_refused_and_of_another_form_agrees(
    workdir, valid_result):
  """--config may change how the trained network is computed (attention_form), not which
  network it is (head_activation, the first input), nor ask for a batch the devices cannot
  split."""
  evaluate = ("--mode=evaluate", f"--workdir={workdir}")
  for flag, message in (
      ("--config.model.head_activation=linear",
       "was trained as another network (model.head_activation is tanh there, linear here)"),
      ("--config.data.start_symbol=false",
       "was trained as another network (data.start_symbol is True there, False here)"),
      ("--config.data.eval_batch_size=63", "config.data.eval_batch_size = 63 (the global "
                                           "batch) does not split over 2 devices")):
    result = tiny_config.run_main(*evaluate, *tiny_config.flags(), flag, check=False)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 1 and len(lines) == 1, result.stderr[-2000:]
    assert message in lines[0]
  scan = tiny_config.run_main(*evaluate, *tiny_config.flags(), "--config.model.attention_form=scan")
  assert json.loads(scan.stdout.splitlines()[-1])["perplexity"] == pytest.approx(
      valid_result["perplexity"], rel=1e-5)


def test_score_log_probs_sum_to_the_evaluate_nll(workdir, valid_result, tmp_path):
  from attnlm_jax import data  # pylint: disable=g-import-not-at-top
  corpus = data.read_split("embedded", "", "valid")
  (tmp_path / "valid.txt").write_text("\n".join(" ".join(s) for s in corpus.sentences))
  tiny_config.run_main("--mode=score", f"--workdir={workdir}", f"--input={tmp_path / 'valid.txt'}",
                       f"--output={tmp_path / 'scores.jsonl'}")
  rows = [json.loads(l) for l in (tmp_path / "scores.jsonl").read_text().splitlines()]
  assert len(rows) == len(corpus.sentences)
  assert rows[0]["tokens"][-1] == "<eos>"
  assert len(rows[0]["tokens"]) == len(rows[0]["log_probs"]) == len(corpus.sentences[0]) + 1
  assert all(lp <= 0 for row in rows for lp in row["log_probs"])
  assert sum(len(r["log_probs"]) for r in rows) == valid_result["tokens"]
  total = sum(sum(r["log_probs"]) for r in rows)
  assert -total == pytest.approx(valid_result["nll"], rel=1e-4)



def test_score_writes_one_record_per_line_of_its_input(workdir, tmp_path):
  """A form feed or U+2028 inside a line does not split it (str.splitlines would)."""
  (tmp_path / "in.txt").write_text("the cat\x0csat\n\nthe dog\u2028ran\n", encoding="utf-8")
  out = tiny_config.run_main("--mode=score", f"--workdir={workdir}",
                             f"--input={tmp_path / 'in.txt'}").stdout
  assert len(out.strip().splitlines()) == 2  # The blank line has no record.


def test_score_refuses_a_file_that_is_not_utf8_in_one_line(workdir, tmp_path):
  (tmp_path / "in.txt").write_bytes("the caf\u00e9\n".encode("latin-1"))
  result = tiny_config.run_main("--mode=score", f"--workdir={workdir}",
                                f"--input={tmp_path / 'in.txt'}", check=False)
  assert result.returncode == 1
  assert result.stderr.strip().splitlines() == [
      f"error: {tmp_path / 'in.txt'}: byte 0xe9 at offset 7 (line 1) is not UTF-8: re-encode "
      "the file as UTF-8"]

def test_generate_is_reproducible_for_a_seed(workdir):
  args = ("--mode=generate", f"--workdir={workdir}", "--prompt=the", "--num_tokens=20")
  first = tiny_config.run_main(*args, "--seed=3").stdout.strip()
  assert first == tiny_config.run_main(*args, "--seed=3").stdout.strip()
  assert first.split()[0] == "the" and len(first.split()) == 21
  assert first != tiny_config.run_main(*args, "--seed=4").stdout.strip()  # the seed decides


@pytest.mark.parametrize("flag, message", [
    ("--config.model.no_such_key=1", "unknown config key --config.model.no_such_key:"),
    ("--config.modle.hidden_size=8",
     "unknown config key --config.modle.hidden_size: did you mean --config.model.hidden_size?"),
    ("--config.model.score=bogus", "unknown score 'bogus'"),
    ("--config.model.hidden_size=abc", "--config.model.hidden_size=abc: 'abc' is not an integer"),
    ("--config.train.learning_rate=fast", "'fast' is not a number"),
    ("--config.data.bucket=maybe", "'maybe' is not true or false"),
    ("--config.model.hidden_size=24", "holds a run of another config (model.hidden_size is"),
    ("--config.model.dropout=0.0", "holds a run of another config (model.dropout is"),
    ("--config.data.corpus=ptb", "data directory"),
])
def test_user_errors_are_one_line_and_write_nothing(workdir, flag, message):
  before = _snapshot(workdir)
  extra = ["--config.data.data_dir=/nonexistent/ptb"] if "corpus" in flag else []
  result = tiny_config.run_main(*tiny_config.flags(), flag, *extra, f"--workdir={workdir}",
                                check=False)
  assert result.returncode == 1
  lines = result.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr[-2000:]
  assert message in lines[0]
  assert _snapshot(workdir) == before



@pytest.mark.parametrize("content, message", [
    ('{"model": {"dropout": true}}', "as a Python config file (NameError: name 'true' is not"),
    ("just some notes\n", "as a Python config file (SyntaxError: invalid syntax"),
    ("CONFIG = 1\n", "has no get_config(): pass one of configs/*.py"),
])
def test_a_config_file_that_is_not_a_config_is_one_line(tmp_path, content, message):
  config = tmp_path / "config.json"
  config.write_text(content)
  result = tiny_config.run_main(f"--config={config}", f"--workdir={tmp_path / 'run'}",
                                check=False)
  lines = result.stderr.strip().splitlines()
  assert result.returncode == 1 and len(lines) == 1, result.stderr[-2000:]
  assert lines[0].startswith(f"error: cannot read --config={config}" if "Python" in message
                             else f"error: --config={config}") and message in lines[0]
  assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("mode, message", [
    ("train", "--mode=train needs --config=configs/NAME.py"),
    ("train_tagger", "--mode=train_tagger needs --config=configs/NAME.py"),
    ("reproduce", "--mode=reproduce needs --table=NAME"),
    ("testtime", "--mode=testtime needs --table=NAME"),
])
def test_a_mode_without_the_flag_it_needs_says_which(tmp_path, mode, message):
  result = tiny_config.run_main(f"--mode={mode}", f"--workdir={tmp_path}", check=False)
  assert result.returncode == 1
  assert result.stderr.strip().splitlines() == [f"error: {message}" + (
      " (docs/reproduce.md lists the tables)" if "table" in message else "")]
  assert not any(tmp_path.iterdir())


# Runs `attnlm_jax.main` on each argv of sys.argv[1] (JSON) in this one process, as far as
# each goes, and prints [exit status, stderr] per argv as one JSON line. (A test process cannot
# import `attnlm_jax.main`: `attnlm_jax.data.inspect`, imported by other test files, defines
# flags of the same names.)
_IN_ONE_PROCESS = """
import contextlib, io, json, sys
from attnlm_jax import main
main.distributed.initialize = lambda *args: None   # once per process: one process here
results = []
for args in json.loads(sys.argv[1]):
  sys.argv = ["main", *args]   # ml_collections reads the --config.* overrides there
  stderr = io.StringIO()
  try:
    with contextlib.redirect_stderr(stderr):
      main.main(main._parse_flags(sys.argv))
    status = 0
  except SystemExit as e:
    status = e.code
  except Exception as e:   # a traceback
    status = type(e).__name__
  main.FLAGS.unparse_flags()
  for name in [name for name in main.FLAGS if name.startswith("config.")]:
    delattr(main.FLAGS, name)   # the overrides' flags, defined anew by the next parse
  results.append([status, stderr.getvalue()])
print(json.dumps(results))
"""

# Flags that do not go together -> the start of the one error line ({tmp}: a directory holding
# `a_file` and `in.txt`, and no run).
REFUSED = {
    "missing_config": (("--config=configs/no_such.py", "--workdir={tmp}/run"),
                       "cannot load --config=configs/no_such.py: "),
    "missing_config_with_an_override": (
        ("--config=configs/no_such.py", "--config.train.num_epochs=1", "--workdir={tmp}/run"),
        "cannot load --config=configs/no_such.py: "),  # then ml_collections' words
    "missing_config_given_with_a_space": (
        ("--config", "configs/no_such.py", "--config.train.num_epochs=1",
         "--workdir={tmp}/run"),
        "cannot load --config=configs/no_such.py: "),
    "tagger_config_to_train": (
        ("--config=configs/tagger.py", "--workdir={tmp}/run"),
        "--config=configs/tagger.py is the POS tagger's config, for --mode=train_tagger: "
        "--mode=train takes a language model's, e.g. --config=configs/ptb.py"),
    "language_model_config_to_train_tagger": (
        ("--mode=train_tagger", "--config=configs/demo.py", "--workdir={tmp}/run"),
        "--mode=train_tagger trains the POS tagger of --config=configs/tagger.py: "
        "--config=configs/demo.py is a language model's config, for --mode=train"),
    "config_override_to_reproduce": (
        ("--mode=reproduce", "--table=demo", "--dry_run", "--config=configs/demo.py",
         "--config.train.num_epochs=1", "--workdir={tmp}/run"),
        "--mode=reproduce runs each row of --table with the row's own config, not --config: "
        "drop --config and --config.*, or train one row alone, with your overrides, by its "
        "command (--dry_run prints it; docs/reproduce.md)"),
    "config_to_testtime": (
        ("--mode=testtime", "--table=demo", "--config=configs/demo.py", "--workdir={tmp}/run"),
        "--mode=testtime runs each row of --table with the row's own config, not --config: "
        "drop --config and --config.*, or evaluate one row alone with --mode=evaluate "
        "--workdir=WORKDIR/ROW (docs/testtime.md)"),
    "cache_theta_without_cache": (
        ("--mode=evaluate", "--cache_theta=0.3", "--workdir={tmp}/run"),
        "--cache_theta acts only with --mode=evaluate --cache=SIZE: add them, or drop "
        "--cache_theta"),
    "cache_states_in_testtime": (
        ("--mode=testtime", "--table=demo", "--cache=100", "--cache_states=head",
         "--workdir={tmp}/run"),
        "--cache_states acts only with --mode=evaluate --cache=SIZE: add them, or drop "
        "--cache_states"),
    "dynamic_decay_without_dynamic": (
        ("--mode=evaluate", "--dynamic_decay=0", "--workdir={tmp}/run"),
        "--dynamic_decay acts only with --mode=evaluate --dynamic=sgd|rms: add them, or drop "
        "--dynamic_decay"),
    "weights_without_workdirs": (
        ("--mode=evaluate", "--weights=0.5,0.5", "--workdir={tmp}/run"),
        "--weights acts only with --mode=evaluate --workdirs=DIR1,DIR2: add them, or drop "
        "--weights"),
    "score_output_that_is_its_input": (
        ("--mode=score", "--input={tmp}/in.txt", "--output={tmp}/../{tmp.name}/in.txt",
         "--workdir={tmp}/run"),
        "--output={tmp}/in.txt would overwrite {tmp}/in.txt, read by --input: name another "
        "file for --output"),
    "workdir_that_is_a_file": (
        ("--config=configs/demo.py", "--workdir={tmp}/a_file"),
        "--workdir={tmp}/a_file: {tmp}/a_file is a file, not a directory: name a directory "
        "(or one to create)"),
    "workdir_below_a_file": (
        ("--mode=reproduce", "--table=demo", "--dry_run", "--workdir={tmp}/a_file/demo"),
        "--workdir={tmp}/a_file/demo: {tmp}/a_file is a file, not a directory: name a "
        "directory (or one to create)"),
}


@pytest.fixture(scope="module")
def refused(tmp_path_factory):
  """{name: (exit status, stderr)} of each REFUSED command line, all run in one process, and
  the directory they name."""
  tmp = tmp_path_factory.mktemp("refused")
  (tmp / "a_file").write_text("not a directory\n")
  (tmp / "in.txt").write_text("the cat\n")
  argvs = [[arg.format(tmp=tmp) for arg in args] for args, _ in REFUSED.values()]
  done = subprocess.run([sys.executable, "-c", _IN_ONE_PROCESS, json.dumps(argvs)],
                        cwd=tiny_config.REPO, capture_output=True, text=True, timeout=300,
                        check=True)
  return dict(zip(REFUSED, json.loads(done.stdout.splitlines()[-1]))), tmp


@pytest.mark.parametrize("name", REFUSED)
def test_flags_that_do_not_go_together_are_one_line_and_change_nothing(refused, name):
  """A missing config file with overrides, a config of the other kind for --mode, a config
  that --mode would ignore, a flag without the one it acts with, an --output that is the
  --input, a --workdir at or below a file."""
  results, tmp = refused
  status, stderr = results[name]
  lines = stderr.strip().splitlines()
  assert status == 1 and len(lines) == 1, stderr[-2000:]
  assert lines[0].startswith("error: " + REFUSED[name][1].format(tmp=tmp))
  assert sorted(p.name for p in tmp.iterdir()) == ["a_file", "in.txt"]
  assert (tmp / "in.txt").read_text() == "the cat\n"


def test_analyze_writes_heatmap_entropy_and_probe_files(workdir, tmp_path):
  out = tmp_path / "analysis_run"
  result = tiny_config.run_main("--mode=analyze", f"--workdir={out}", f"--workdirs={workdir}",
                                "--sentences=the keys to the cabinet are on the table")
  summary = json.loads(result.stdout.splitlines()[-1])
  written = {p.name for p in (out / "analysis").iterdir()}
  assert {"attention.png", "attention.json", "entropy.png", "entropy.json"} <= written
  assert any(name.startswith("probe") and name.endswith(".png") for name in written)
  assert set(summary["files"]) == written
  [heatmap] = json.loads((out / "analysis" / "attention.json").read_text())
  assert heatmap["sentence"] == "the keys to the cabinet are on the table"
  [(label, weights)] = heatmap["models"].items()
  assert weights["weights"] and summary["probe"]
  for row in weights["weights"]:          # each predicted word's weights over its slots
    assert sum(w for w in row if w is not None) == pytest.approx(1.0, abs=1e-4)
  # The printed summary is the library's on the workdir's model.
  model = evaluate.load(workdir)
  effect = analysis.smoothing_effect(model, "valid")
  for key in ("entropy", "uniform_entropy", "entropy_ratio", "kl"):
    assert summary["entropy"][label][key] == pytest.approx(effect[key], rel=1e-5), key
  assert summary["probe"] == {name: {label: probes.probe(model, items)["accuracy"]}
                              for name, items in probes.read_probes().items()}


def test_pages_only_rewrites_a_table_in_training_and_trains_nothing(tmp_path):
  """--mode=reproduce --pages_only on a copy of the committed salton_ptb table whose row
  conv1x1 is cut back to its first 10 epochs, as if still training (and no row has
  checkpoints): the pages are written again, the logs left as they were."""
  committed = tiny_config.COMMITTED_RESULTS / "salton_ptb"
  workdir = tmp_path / "salton_ptb"
  shutil.copytree(committed, workdir)
  log = workdir / "conv1x1" / "metrics.jsonl"
  lines = log.read_text().splitlines(keepends=True)
  tenth = next(i for i, line in enumerate(lines)
               if json.loads(line).get("epoch") == 10 and "valid_perplexity" in line)
  log.write_text("".join(lines[:tenth + 1]))
  pages = ("results.json", "results.md", "curves.png")
  for name in pages:
    (workdir / name).unlink()
  logs = _snapshot(workdir)
  result = tiny_config.run_main("--mode=reproduce", "--table=salton_ptb", f"--workdir={workdir}",
                                "--pages_only")
  summary = json.loads(result.stdout.splitlines()[-1])
  statuses = {r["name"]: r["status"]
              for r in json.loads((committed / "results.json").read_text())["rows"]}
  assert summary["trained"] == []
  assert summary["rows"] == {**statuses, "conv1x1": "running: epoch 10 of 22"}
  assert all((workdir / name).exists() for name in pages)
  assert {path: digest for path, digest in _snapshot(workdir).items()
          if path in logs} == logs


def test_a_missing_split_file_is_refused_before_the_workdir_is_written(tmp_path):
  corpus = tmp_path / "ptb"
  corpus.mkdir()
  for split in ("train", "valid"):                    # ptb.test.txt missing
    (corpus / f"ptb.{split}.txt").write_text(" the cat sat \n a dog ran \n")
  workdir = tmp_path / "run"
  result = tiny_config.run_main(*tiny_config.flags(), "--config.data.corpus=ptb",
                                f"--config.data.data_dir={corpus}", f"--workdir={workdir}",
                                check=False)
  assert result.returncode == 1
  lines = result.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith(f"error: {corpus / 'ptb.test.txt'} not found")
  assert not workdir.exists()
