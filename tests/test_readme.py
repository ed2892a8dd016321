"""The README's quick start, run verbatim as a new user would: a copy of the repository, a
virtualenv of its own, the commands parsed from README.md, relative paths from the root."""

import importlib.metadata
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import sysconfig

import pytest

import tiny_config

README = tiny_config.REPO / "README.md"
# What a clone holds that the copy must not: local environments, runs and caches.
NOT_IN_A_CLONE = (".git", ".venv", "workdirs", "runs", "__pycache__", "*.egg-info",
                  ".pytest_cache")
# The test suite's second command runs one small test file, not the suite again.
QUICK_TEST_FILE = "tests/models/test_losses.py"
TIMEOUT = 900


def quick_start_commands(readme: str) -> list[str]:
  """The shell lines of the first ```bash block under "## Quick start" (comments dropped)."""
  section = readme.split("## Quick start", 1)[1]
  block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
  return [line for line in block.splitlines() if line.strip() and not line.startswith("#")]


def _json_lines(text: str) -> list[dict]:
  return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


@pytest.fixture(scope="module")
def fresh_clone(tmp_path_factory):
  """A copy of the repository and a virtualenv whose `pip` and `python` come first on PATH.

  The virtualenv sees this environment's site-packages (a .pth file), so `pip install` finds
  the dependencies already there and only installs the project, without a download.
  """
  root = tmp_path_factory.mktemp("quick_start")
  clone = root / "attnlm_jax"
  shutil.copytree(tiny_config.REPO, clone, ignore=shutil.ignore_patterns(*NOT_IN_A_CLONE))
  venv = root / "venv"
  subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
  child_purelib = subprocess.run(
      [str(venv / "bin" / "python"), "-c",
       "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
      check=True, capture_output=True, text=True).stdout.strip()
  pathlib.Path(child_purelib, "parent_environment.pth").write_text(
      "\n".join({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}) + "\n")
  env = {key: value for key, value in os.environ.items()
         if key not in ("ATTNLM_DATA_DIR", "PYTHONPATH", "VIRTUAL_ENV", "PYTEST_ADDOPTS")}
  env.update(PATH=f"{venv / 'bin'}{os.pathsep}{env['PATH']}", VIRTUAL_ENV=str(venv),
             XDG_DATA_HOME=str(root / "xdg_data"), PIP_DISABLE_PIP_VERSION_CHECK="1")
  return clone, env


def _run(command: str, clone: pathlib.Path, env: dict) -> subprocess.CompletedProcess:
  result = subprocess.run(["bash", "-c", command], cwd=clone, env=env, capture_output=True,
                          text=True, timeout=TIMEOUT)
  assert result.returncode == 0, (f"`{command}` exited with {result.returncode}:\n"
                                  f"{result.stderr[-3000:]}")
  return result


def test_the_readme_has_the_two_quick_start_commands():
  commands = quick_start_commands(README.read_text())
  assert len(commands) == 2
  assert "--workdir=workdirs/demo" in commands[0]       # a relative workdir, as users type
  assert commands[1].endswith("python -m pytest")


def test_the_python_the_readme_and_setup_ask_for_is_what_the_pinned_jax_needs():
  """pip refuses a jax of the pinned range on an older Python with a message about jax, not
  the project: the README's quick start and setup.py's python_requires name the Python of the
  range's floor (jax 0.10.2: 3.11), which a newer jax installed here (0.11, 0.12: 3.12) may
  raise but never lower."""
  setup = (tiny_config.REPO / "setup.py").read_text()
  floor_jax = re.search(r'"jax>=([0-9.]+),', setup)[1]
  python = re.search(r'python_requires=">=([0-9.]+)"', setup)[1]
  assert f"with Python {python}+," in README.read_text()
  installed = importlib.metadata.metadata("jax")
  needs = installed["Requires-Python"].removeprefix(">=")      # ">=3.11" for jax 0.10
  as_tuple = lambda version: tuple(int(part) for part in version.split("."))
  if installed["Version"] == floor_jax:
    assert needs == python
  else:
    assert as_tuple(installed["Version"]) > as_tuple(floor_jax)
    assert as_tuple(needs) >= as_tuple(python)


@pytest.mark.slow
def test_the_quick_start_trains_and_evaluates_the_demo(fresh_clone):
  clone, env = fresh_clone
  train_and_evaluate = quick_start_commands(README.read_text())[0]
  result = _run(train_and_evaluate, clone, env)
  summary, evaluation = _json_lines(result.stdout)[-2:]
  workdir = clone / "workdirs" / "demo"
  start = json.loads((workdir / "metrics.jsonl").read_text().splitlines()[0])
  assert summary["valid_perplexity"] < start["unigram_valid_perplexity"] / 3
  assert evaluation["split"] == "test" and evaluation["step"] == summary["best_step"]
  assert evaluation["perplexity"] == pytest.approx(summary["test_perplexity"], rel=1e-6)
  assert not list(workdir.rglob("*.orbax-checkpoint-tmp*"))   # every save completed
  # The example output docs/training.md quotes is what the demo gives (to the run-to-run
  # variation of float32 arithmetic between CPUs).
  quoted = json.loads(re.search(r"(\{\"split\": \"test\".*?\})",
                                (clone / "docs" / "training.md").read_text(), re.S).group(1))
  assert evaluation["tokens"] == quoted["tokens"]
  assert evaluation["perplexity"] == pytest.approx(quoted["perplexity"], rel=0.05)


@pytest.mark.slow
def test_the_quick_start_installs_the_test_extra_and_runs_pytest(fresh_clone):
  clone, env = fresh_clone
  install_and_test = quick_start_commands(README.read_text())[1]
  result = _run(install_and_test, clone, {**env, "PYTEST_ADDOPTS": f"{QUICK_TEST_FILE} -n 0"})
  assert re.search(r"\d+ passed", result.stdout), result.stdout[-2000:]


def _test_numbers(value, path: tuple = ()) -> set[str]:
  """The test results in a results file's value, as the README quotes them (one decimal):
  perplexities under either rule (a row's, a test-time method's), accuracies in percent and
  the differences to the printed test number (unsigned); never a validation or training
  number, a grid search's point, a time or a setting."""
  if isinstance(value, dict):
    return set().union(set(), *(_test_numbers(v, path + (k,)) for k, v in value.items()))
  if isinstance(value, list):
    return set().union(set(), *(_test_numbers(v, path) for v in value))
  if not isinstance(value, (int, float)) or isinstance(value, bool) or not path:
    return set()
  if any(word in key for key in path for word in ("valid", "train", "grid", "progress")):
    return set()
  key = path[-1]
  if key.endswith(("perplexity", "perplexity_paper_convention", "accuracy")) or path[-2:] in (
      ("test", "difference"), ("test", "percent")):
    return {f"{abs(value) * (100 if key.endswith('accuracy') else 1):.1f}"}
  return set()


def _written(path) -> set[str]:
  """The test numbers of a table's page (its results.json or testtime.json)."""
  return _test_numbers(json.loads(path.read_text()))


def _printed_numbers() -> set[str]:
  """The papers' printed test perplexities, and how far apart those of one paper are."""
  from attnlm_jax.experiments import printed  # pylint: disable=import-outside-toplevel
  tests = [(r.paper, r.corpus, r.test) for r in printed.PAPER_RESULTS]
  return ({f"{t:.1f}" for _, _, t in tests}
          | {f"{abs(a - b):.1f}" for pa, ca, a in tests for pb, cb, b in tests
             if (pa, ca) == (pb, cb) and a != b})


def test_the_results_section_quotes_only_numbers_the_committed_runs_wrote():
  """Every one-decimal number of the README's results is a test result of a table's row (its
  page's results.json or testtime.json), a printed number, or the gap between two of one
  paper's printed numbers."""
  section = README.read_text().split("## Results", 1)[1].split("\n## ", 1)[0]
  written = set().union(*(_written(path) for name in ("results.json", "testtime.json")
                          for path in (tiny_config.REPO / "docs" / "results").glob(f"*/{name}")))
  numbers = lambda text: set(re.findall(r"(?<![\w.-])-?(\d+\.\d)\b", text))  # not lr0.1
  quoted = numbers(section)
  assert quoted and quoted <= written | _printed_numbers(), sorted(
      quoted - written - _printed_numbers())
  # The prose quotes what the section's generated tables show (`summary` checks them against
  # the pages), not another row's number from elsewhere.
  generated = r"<!-- BEGIN (\w+) -->.*?<!-- END \1 -->"
  shown = numbers("".join(m.group(0) for m in re.finditer(generated, section, re.S)))
  prose = numbers(re.sub(generated, "", section, flags=re.S))
  assert prose and prose <= shown | _printed_numbers(), sorted(
      prose - shown - _printed_numbers())


def _printed(value) -> set[float]:
  """Every number in a benchmark's JSON line."""
  if isinstance(value, dict):
    return set().union(set(), *map(_printed, value.values()))
  if isinstance(value, list):
    return set().union(set(), *map(_printed, value))
  if isinstance(value, (int, float)) and not isinstance(value, bool):
    return {float(value)}
  return set()


def test_the_performance_section_quotes_only_numbers_the_committed_benchmarks_printed():
  section = README.read_text().split("## Performance", 1)[1].split("\n## ", 1)[0]
  printed = set().union(*(_printed(json.loads(line))
                          for path in tiny_config.REPO.glob("benchmarks/results/**/*.jsonl")
                          for line in path.read_text().splitlines()))
  # Decimal numbers, not versions such as 0.10.2.
  quoted = {float(number.replace(",", ""))
            for number in re.findall(r"(?<![\d.])-?\d[\d,]*\.\d+(?![\d.])", section)}
  assert quoted and quoted <= printed, sorted(quoted - printed)
