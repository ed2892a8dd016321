"""Faults a new user meets, each answered with one line and nothing lost: relative paths in
every mode, corrupted checkpoints, a diverging run, bad generate/score arguments, evaluating
with another span, a workdir from another machine, broken test-time files."""

import hashlib
import json
import re
import shutil
import subprocess

from etils import epath
import pytest

from attnlm_jax.common import errors
from attnlm_jax.data import corpus
from attnlm_jax.experiments import row_status
from attnlm_jax.experiments import runs
from attnlm_jax.experiments import testtime_page
from attnlm_jax.experiments import testtime_rows
from attnlm_jax.training import checkpoints
import tiny_config

# Two epochs of 50 steps; step checkpoints every 20 steps, so the run ends holding steps 80
# and 100 (the latest two) and the best epoch's.
EPOCHS = 2
LAST_STEP = 100


def _config_flags(**overrides) -> list[str]:
  """tiny_config's flags with the config file named from any directory."""
  config, *rest = tiny_config.flags(**overrides)
  return [config.replace("configs/", f"{tiny_config.REPO / 'configs'}/"), *rest]


def _error_line(result: subprocess.CompletedProcess, after_training_logs=False) -> str:
  """The one `error: ` line on stderr, with no traceback: the only line, or with
  `after_training_logs` the last one, after a training run's log lines."""
  assert result.returncode == 1, result.stderr[-2000:]
  lines = result.stderr.strip().splitlines()
  errors = [line for line in lines if line.startswith("error: ")]
  expected = lines[-1:] if after_training_logs else lines
  assert errors == expected and len(errors) == 1 and "Traceback" not in result.stderr, \
      result.stderr[-3000:]
  return errors[0]


def _snapshot(path) -> dict:
  return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
          for p in sorted(path.rglob("*")) if p.is_file()}


def _json_lines(text: str) -> list[dict]:
  return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
  """A directory holding `runs/tiny`, trained there with a relative --workdir."""
  cwd = tmp_path_factory.mktemp("user")
  result = tiny_config.run_main(*_config_flags(train__num_epochs=EPOCHS), "--workdir=runs/tiny",
                                cwd=cwd)
  summary = _json_lines(result.stdout)[-1]
  assert summary["epochs"] == EPOCHS and summary["workdir"] == str(cwd / "runs" / "tiny")
  assert "best epoch's checkpoint" not in result.stderr   # the best epoch's is there
  return cwd


@pytest.fixture
def copy(trained, tmp_path):
  """A copy of the trained directory that a test may damage: (cwd, workdir)."""
  shutil.copytree(trained, tmp_path / "user")
  return tmp_path / "user", tmp_path / "user" / "runs" / "tiny"


def test_every_mode_takes_relative_paths(copy):
  cwd, workdir = copy
  (cwd / "sentences.txt").write_text("the keys to the cabinet are on the table\n")
  evaluation = _json_lines(tiny_config.run_main("--mode=evaluate", "--workdir=runs/tiny",
                                                cwd=cwd).stdout)[-1]
  assert evaluation["split"] == "valid"
  tiny_config.run_main("--mode=score", "--workdir=runs/tiny", "--input=sentences.txt",
                       "--output=scores/new/valid.jsonl", cwd=cwd)  # the directory is made
  assert json.loads((cwd / "scores" / "new" / "valid.jsonl").read_text())["log_probs"]
  generated = tiny_config.run_main("--mode=generate", "--workdir=runs/tiny", "--prompt=the",
                                   "--num_tokens=5", cwd=cwd).stdout.split()
  assert generated[0] == "the" and len(generated) == 6
  mixture = _json_lines(tiny_config.run_main("--mode=evaluate", "--workdirs=runs/tiny,runs/tiny",
                                             "--weights=0.5,0.5", cwd=cwd).stdout)[-1]
  assert mixture["perplexity"] == pytest.approx(evaluation["perplexity"], rel=1e-5)
  tiny_config.run_main("--mode=analyze", "--workdir=analysis_out", "--workdirs=runs/tiny",
                       "--sentences=the keys to the cabinet are here", cwd=cwd)
  assert (cwd / "analysis_out" / "analysis" / "attention.png").is_file()
  assert not list(cwd.rglob("*.orbax-checkpoint-tmp*"))


def _step_dir(workdir, step):
  return workdir / "checkpoints" / str(step)


def _truncate_largest_state_file(step_dir):
  files = [p for p in (step_dir / "state").rglob("*") if p.is_file()]
  largest = max(files, key=lambda p: p.stat().st_size)
  largest.write_bytes(largest.read_bytes()[:largest.stat().st_size // 2])


def _delete_metadata(step_dir):
  for path in step_dir.rglob("_METADATA"):
    path.unlink()


def _delete_state(step_dir):
  shutil.rmtree(step_dir / "state")


CORRUPTIONS = [_truncate_largest_state_file, _delete_metadata, _delete_state]


def test_resume_skips_an_unreadable_latest_checkpoint(copy):
  """A crash mid-write: every kind of damage is one CheckpointError to the fallback, which
  the evaluate test below checks kind by kind."""
  cwd, workdir = copy
  _truncate_largest_state_file(_step_dir(workdir, LAST_STEP))
  result = tiny_config.run_main(*_config_flags(train__num_epochs=EPOCHS + 1), "--workdir=runs/tiny",
                                cwd=cwd)
  warnings = [line for line in result.stderr.splitlines() if "trying the one before" in line]
  assert len(warnings) == 1 and f"checkpoint {LAST_STEP}" in warnings[0], result.stderr[-3000:]
  records = [json.loads(l) for l in (workdir / "metrics.jsonl").read_text().splitlines()]
  restarts = [r for r in records if r.get("event") == "start"]
  assert restarts[-1]["step"] == 80                   # resumed from the checkpoint before
  assert (workdir / "unreadable_checkpoints" / str(LAST_STEP)).is_dir()   # kept, set aside
  assert _json_lines(result.stdout)[-1]["epochs"] == EPOCHS + 1


def test_a_resume_without_the_best_epochs_checkpoint_says_which_epoch_it_evaluates(copy):
  """A run resumed from its latest checkpoint copied alone (the best epoch's left behind on
  another machine) evaluates the best checkpoint it holds, and says so in its log and record."""
  cwd, workdir = copy
  meta_file = _step_dir(workdir, LAST_STEP) / "meta" / "metadata"
  meta = json.loads(meta_file.read_text())
  assert meta["epoch"] == EPOCHS and meta["epoch_done"]
  # Epoch 1 the best by far (no later epoch beats it), its checkpoint left behind.
  meta["early_stopping"].update(best_epoch=1, best_perplexity=1.0, bad_epochs=1)
  meta_file.write_text(json.dumps(meta))
  shutil.rmtree(_step_dir(workdir, LAST_STEP // EPOCHS), ignore_errors=True)
  result = tiny_config.run_main(*_config_flags(train__num_epochs=EPOCHS + 1),
                                "--workdir=runs/tiny", cwd=cwd)
  warnings = [line for line in result.stderr.splitlines() if "best epoch's checkpoint" in line]
  assert len(warnings) == 1 and "(epoch 1, valid perplexity 1.00)" in warnings[0], \
      result.stderr[-3000:]
  final = json.loads((workdir / "metrics.jsonl").read_text().splitlines()[-1])
  assert final["best_valid_epoch_without_checkpoint"] == 1
  assert final["best_epoch"] in (EPOCHS, EPOCHS + 1) and "final_test_perplexity" in final


def test_a_tie_kept_as_the_other_epochs_checkpoint_is_not_called_missing(copy):
  """Of two epochs tied on validation perplexity, early stopping picks the first (strictly
  lower improves) and the checkpoints may keep either: nothing is missing then."""
  cwd, workdir = copy
  ckpt = checkpoints.Checkpoints(workdir, read_only=True)
  kept_step = ckpt.best_step()
  kept_epoch = kept_step // (LAST_STEP // EPOCHS)
  meta_file = _step_dir(workdir, LAST_STEP) / "meta" / "metadata"
  meta = json.loads(meta_file.read_text())
  # The other epoch early stopping's best at the kept one's perplexity; patience spent, so the
  # resumed run goes straight to its final evaluation.
  meta["early_stopping"].update(best_epoch=1 if kept_epoch == 2 else 2,
                                best_perplexity=ckpt.valid_perplexity(kept_step), bad_epochs=2)
  meta_file.write_text(json.dumps(meta))
  result = tiny_config.run_main(*_config_flags(train__num_epochs=EPOCHS + 1),
                                "--workdir=runs/tiny", cwd=cwd)
  assert "best epoch's checkpoint" not in result.stderr, result.stderr[-3000:]
  final = json.loads((workdir / "metrics.jsonl").read_text().splitlines()[-1])
  assert final["best_epoch"] == kept_epoch and "final_test_perplexity" in final
  assert "best_valid_epoch_without_checkpoint" not in final


@pytest.mark.parametrize("corrupt", CORRUPTIONS, ids=lambda f: f.__name__.strip("_"))
def test_evaluate_on_an_unreadable_checkpoint_is_one_line(copy, corrupt):
  cwd, workdir = copy
  best = checkpoints.Checkpoints(workdir, read_only=True).best_step()   # what evaluate reads
  corrupt(_step_dir(workdir, best))
  before = _snapshot(workdir)
  line = _error_line(tiny_config.run_main("--mode=evaluate", "--workdir=runs/tiny", cwd=cwd,
                                          check=False))
  assert f"checkpoint {best}" in line and "cannot be read" in line
  assert line.endswith(f"or move {workdir / 'checkpoints' / str(best)} aside to use the best "
                       "readable checkpoint instead")
  assert _snapshot(workdir) == before


def test_no_readable_checkpoint_is_one_line_and_keeps_the_files(copy):
  cwd, workdir = copy
  for step_dir in (workdir / "checkpoints").iterdir():
    if step_dir.name.isdigit():
      shutil.rmtree(step_dir / "state")
  before = _snapshot(workdir)
  line = _error_line(tiny_config.run_main(*_config_flags(train__num_epochs=EPOCHS + 1),
                                          "--workdir=runs/tiny", cwd=cwd, check=False),
                     after_training_logs=True)
  assert "no checkpoint" in line and "can be read" in line
  assert _snapshot(workdir) == before


def test_divergence_stops_in_one_line_and_a_smaller_lr_resumes(copy):
  cwd, workdir = copy
  checkpoints_before = _snapshot(workdir / "checkpoints")
  result = tiny_config.run_main(
      *_config_flags(train__num_epochs=EPOCHS + 1, train__learning_rate=200.0),
      "--workdir=runs/tiny", cwd=cwd, check=False)
  line = _error_line(result, after_training_logs=True)
  assert "training diverged at step" in line and "learning rate 200" in line
  assert f"last good checkpoint (step {LAST_STEP})" in line
  assert "--config.train.learning_rate" in line
  assert _snapshot(workdir / "checkpoints") == checkpoints_before
  event = json.loads((workdir / "metrics.jsonl").read_text().splitlines()[-1])  # The log says so.
  assert event["event"] == "diverged" and event["learning_rate"] == 200.0
  assert line.startswith(f"error: training diverged at step {event['step']} (learning rate "
                         f"200): {event['reason']}; ")
  assert event["step"] > LAST_STEP and runs.read_run(workdir)["diverged"] == {
      key: event[key] for key in ("step", "learning_rate", "reason")}
  result = tiny_config.run_main(
      *_config_flags(train__num_epochs=EPOCHS + 1, train__learning_rate=0.5),
      "--workdir=runs/tiny", cwd=cwd)
  summary = _json_lines(result.stdout)[-1]
  assert summary["epochs"] == EPOCHS + 1 and summary["valid_perplexity"] < 1e4
  assert runs.read_run(workdir)["diverged"] is None  # The resumed session did not.


@pytest.mark.parametrize("flags, message", [
    (("--mode=generate", "--temperature=-1"), "--temperature"),
    (("--mode=generate", "--temperature=inf"), "temperature inf is not a number from 0"),
    (("--mode=generate", "--temperature=nan"), "temperature nan is not a number from 0"),
    (("--mode=generate", "--num_tokens=-5"), "--num_tokens"),
    (("--mode=generate", "--num_tokens=0"), "--num_tokens"),
    (("--mode=score", "--input=empty.txt"), "has no sentence to score"),
    (("--mode=score", "--input=missing.txt"), "not found"),
    (("--mode=score", "--input=one.txt", "--output=out"), "/out is a directory: name a file"),
    (("--mode=evaluate", "--cache=10", "--cache_theta=inf"), "--cache_theta=inf must be a"),
    (("--mode=rescore", "--input=one.txt", "--word_penalty=nan"),
     "--word_penalty=nan must be a finite number"),
])
def test_bad_arguments_are_one_line(trained, flags, message):
  (trained / "empty.txt").write_text("\n  \n")
  (trained / "one.txt").write_text("the dog runs\n")
  (trained / "out").mkdir(exist_ok=True)
  line = _error_line(tiny_config.run_main(*flags, "--workdir=runs/tiny", cwd=trained, check=False))
  assert message in line


def test_unknown_prompt_words_are_named(trained):
  result = tiny_config.run_main("--mode=generate", "--workdir=runs/tiny",
                                "--prompt=the zyzzyva qwfp", "--num_tokens=3", cwd=trained)
  assert "read as <unk>: zyzzyva qwfp" in result.stderr
  assert result.stdout.split()[:3] == ["the", "zyzzyva", "qwfp"]


def test_evaluate_with_another_span_names_it_and_not_a_corrupt_checkpoint(trained):
  """A stream-protocol config restores each training row's carried state too, which a run
  trained on sentences never saved: the difference is named, not the checkpoint blamed."""
  before = _snapshot(trained)
  line = _error_line(tiny_config.run_main(
      "--mode=evaluate", "--workdir=runs/tiny",
      *_config_flags(data__span="stream", data__bucket=False), cwd=trained, check=False))
  assert "was trained as another network (data.span is sentence there, stream here)" in line
  assert _snapshot(trained) == before


def test_a_workdir_from_another_machine_reads_this_machines_corpus(copy, tmp_path,
                                                                   monkeypatch):
  """Its config.json's data_dir, absent here, gives way to the data root's directory of the
  same corpus (ATTNLM_DATA_DIR), said in one line; when that is missing too, the corpus's
  download command."""
  cwd, workdir = copy
  saved = json.loads((workdir / checkpoints.CONFIG_FILE).read_text())
  saved["data"].update(corpus="ptb", data_dir="/elsewhere/attnlm_jax/ptb")
  (workdir / checkpoints.CONFIG_FILE).write_text(json.dumps(saved))
  here = tmp_path / "data" / "ptb"
  here.mkdir(parents=True)
  for split in corpus.SPLITS:   # The embedded corpus as PTB's files (the same reader).
    (here / f"ptb.{split}.txt").write_bytes(corpus._read_embedded(split)[1])
  monkeypatch.setenv("ATTNLM_DATA_DIR", str(here.parent))
  result = tiny_config.run_main("--mode=evaluate", "--workdir=runs/tiny", cwd=cwd)
  final = json.loads((workdir / "metrics.jsonl").read_text().splitlines()[-1])
  assert _json_lines(result.stdout)[-1]["perplexity"] == pytest.approx(
      final["final_valid_perplexity"], rel=1e-5)
  assert (f"{workdir / checkpoints.CONFIG_FILE}'s data_dir /elsewhere/attnlm_jax/ptb is not a "
          f"directory here: reading the corpus from {here}") in result.stderr
  monkeypatch.setenv("ATTNLM_DATA_DIR", str(tmp_path / "empty"))
  line = _error_line(tiny_config.run_main("--mode=evaluate", "--workdir=runs/tiny", cwd=cwd,
                                          check=False), after_training_logs=True)
  assert line.startswith(f"error: data directory {tmp_path / 'empty' / 'ptb'} does not exist: "
                         'download Penn Treebank with "python -m attnlm_jax.data.download '
                         '--corpus=ptb"')


@pytest.mark.parametrize("name, text, problem, fix", [
    (testtime_rows.HEAD_CACHE_FILE, "", "Expecting value, line 1",
     "make it again with --mode=evaluate --split=test --cache=SIZE --cache_states=head "
     "--workdir={row} > {path}, or delete it"),
    (testtime_rows.HEAD_CACHE_FILE, '{"method": "cache"}\n{"method": "cache"}\n',
     "Extra data, line 2", "make it again with"),
    (testtime_rows.ROW_FILE, '{\n "step": 5,\n "ca', "Unterminated string starting at, line 3",
     "delete it to evaluate the row again"),
    (testtime_rows.PROGRESS_FILE, '{"made_with": {', "Expecting property name enclosed in "
     "double quotes, line 1", "delete it: the row's evaluation then starts afresh")],
    ids=["empty", "two_lines", "cut_off_results", "cut_off_progress"])
def test_a_rows_broken_testtime_file_is_one_line_and_kept(tmp_path, name, text, problem, fix):
  """Every row's files are read whatever --rows names: one that is not one JSON value (a
  failed `> cache_head.json`, a cut-off file) is named, with its fix."""
  row = tmp_path / "none"
  row.mkdir()
  (row / name).write_text(text)
  path = row / name
  with pytest.raises(errors.UserError, match=re.escape(
      f"{path} is not one JSON value ({problem}): {fix.format(row=row, path=path)}")):
    testtime_page.run("demo", tmp_path, rows=["single"])
  assert path.read_text() == text and not (tmp_path / testtime_page.PAGE_JSON).exists()


def test_a_stop_while_a_rows_test_time_results_are_written_leaves_no_cut_off_file(
    tmp_path, monkeypatch):
  class Stopped(Exception):
    pass

  def cut_off(path, text, *args, **kwargs):   # Half the text written, then the process stops.
    write_text(path, text[:len(text) // 2], *args, **kwargs)
    raise Stopped

  monkeypatch.setattr(row_status, "read", lambda row, workdir: {"status": row_status.FINISHED})
  monkeypatch.setattr(testtime_rows, "row_results", lambda *args: {"step": 1, "cache": {}})
  path_type = type(epath.Path(tmp_path))
  write_text = path_type.write_text
  monkeypatch.setattr(path_type, "write_text", cut_off)
  (tmp_path / "none").mkdir()
  with pytest.raises(Stopped):
    testtime_page.run("demo", tmp_path, rows=["none"])
  assert not (tmp_path / "none" / testtime_rows.ROW_FILE).exists()   # Evaluated again next.
