"""Tests of launch/tpu.py: the gcloud commands it prints, its flag errors, and its scripts.

No gcloud is needed: the dry-run output is parsed, a stub `gcloud` stands in for the real one,
and the shell scripts sent to the workers run under bash against a stub Python and uv.
"""

import importlib.util
import os
import shlex
import subprocess
import sys
import tarfile

import pytest

import tiny_config

SCRIPT = tiny_config.REPO / "launch" / "tpu.py"
REPO = "https://github.com/OWNER/attnlm_jax"
GCS = "gs://my-bucket/runs/demo"


def _load_module():
  spec = importlib.util.spec_from_file_location("launch_tpu", SCRIPT)
  module = importlib.util.module_from_spec(spec)
  sys.modules[spec.name] = module
  spec.loader.exec_module(module)
  return module


tpu = _load_module()


def _launch(*args, env=None, cwd=tiny_config.REPO):
  return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                        timeout=60, env=env, cwd=cwd)


def _dry_run(*args):
  """Runs the launcher with --dry_run; returns its commands as argv lists."""
  result = _launch(*args, "--dry_run")
  assert result.returncode == 0, result.stderr
  return [shlex.split(line) for line in result.stdout.splitlines()]


def _step(argv):
  """Which launch step a printed command belongs to."""
  if argv[:4] == ["gcloud", "compute", "tpus", "tpu-vm"]:
    verb = argv[4]
    if verb in ("create", "delete"):
      return verb
    if verb == "scp":
      return "fetch" if "--recurse" in argv else "install"
    script = _option(argv, "--command")
    if "git clone" in script or "tar -xzf" in script:
      return "install"
    return "train" if "attnlm_jax.main" in script else "logs"
  return "fetch"  # mkdir -p and gcloud storage cp


def _option(argv, name):
  values = [arg[len(name) + 1:] for arg in argv if arg.startswith(name + "=")]
  assert len(values) == 1, (name, argv)
  return values[0]


def _shell_words(script):
  """Splits a shell script into words, with ; ( ) & | > < as separate tokens."""
  lexer = shlex.shlex(script, posix=True, punctuation_chars=True)
  lexer.whitespace_split = True
  return list(lexer)


def _training_argv(train_command):
  """The python command line inside the train step's remote script."""
  words = _shell_words(_option(train_command, "--command"))
  start = words.index("env")
  return words[start:words.index(";", start)]


@pytest.mark.parametrize("accelerator, hosts, runtime", [
    ("v2-8", 1, "tpu-ubuntu2204-base"),
    ("v3-32", 4, "tpu-ubuntu2204-base"),
    ("v4-8", 1, "tpu-ubuntu2204-base"),
    ("v4-32", 4, "tpu-ubuntu2204-base"),
    ("v5litepod-8", 1, "v2-alpha-tpuv5-lite"),
    ("v5litepod-16", 4, "v2-alpha-tpuv5-lite"),
    ("v5p-8", 1, "v2-alpha-tpuv5"),
    ("v6e-256", 64, "v2-alpha-tpuv6e"),
])
def test_hosts_and_runtime_per_accelerator(accelerator, hosts, runtime):
  assert tpu.num_hosts(accelerator) == hosts
  assert tpu.default_runtime_version(accelerator) == runtime


def test_single_host_dry_run_lists_every_step_in_order():
  commands = _dry_run("--config=configs/demo.py", f"--workdir={GCS}/", "--zone=us-central2-b",
                      "--accelerator_type=v4-8", f"--repo={REPO}", "--ref=v0.1", "--spot",
                      "--config.train.num_epochs=2", "--config.name=it's a run")
  assert [_step(c) for c in commands] == [
      "create", "install", "train", "logs", "logs", "fetch", "fetch", "delete"]
  create, install, train, follow, wait, mkdir, copy, delete = commands

  assert create[:6] == ["gcloud", "compute", "tpus", "tpu-vm", "create", "attnlm-v4-8"]
  for flag in ("--accelerator-type=v4-8", "--zone=us-central2-b",
               "--version=tpu-ubuntu2204-base", "--spot"):
    assert flag in create
  assert "--preemptible" not in create and not any(a.startswith("--project") for a in create)

  assert _option(install, "--worker") == "all"
  words = _shell_words(_option(install, "--command"))
  assert REPO in words and "v0.1" in words and "jax[tpu]>=0.10.2,<0.13" in words
  assert words[words.index("-e") + 1] == "attnlm_jax[gcs]"

  assert _option(train, "--worker") == "all"
  assert _training_argv(train) == [
      "env", "PYTHONUNBUFFERED=1", ".venv/bin/python", "-m", "attnlm_jax.main",
      "--config=configs/demo.py", f"--workdir={GCS}", "--config.train.num_epochs=2",
      "--config.name=it's a run"]

  assert _option(follow, "--worker") == "0" and "tail" in _option(follow, "--command")
  assert _option(wait, "--worker") == "all"
  assert mkdir == ["mkdir", "-p", "workdirs"]
  assert copy == ["gcloud", "storage", "cp", "--recursive", GCS, "workdirs"]
  assert delete == ["gcloud", "compute", "tpus", "tpu-vm", "delete", "attnlm-v4-8",
                    "--quiet", "--zone=us-central2-b"]


def test_pod_slice_dry_run_runs_on_every_worker_and_keeps_the_vm():
  commands = _dry_run("--config=configs/ptb.py:score=single", f"--workdir={GCS}",
                      "--zone=us-central2-b", "--accelerator_type=v4-32", "--name=lm-pod",
                      "--project=my-project", "--preemptible", f"--repo={REPO}",
                      "--nodelete_after", "--config.model.score=combined")
  assert [_step(c) for c in commands] == ["create", "install", "train", "logs", "logs",
                                          "fetch", "fetch"]
  create = commands[0]
  for flag in ("--accelerator-type=v4-32", "--version=tpu-ubuntu2204-base", "--preemptible"):
    assert flag in create
  assert "--spot" not in create
  for command in commands:
    if command[0] == "gcloud" and command[1] == "compute":
      assert command[5] == "lm-pod"
      assert "--project=my-project" in command and "--zone=us-central2-b" in command
  assert [_option(c, "--worker") for c in commands[1:4]] == ["all", "all", "0"]
  training = _training_argv(commands[2])
  assert training[5:] == ["--config=configs/ptb.py:score=single", f"--workdir={GCS}",
                          "--config.model.score=combined"]


def test_v5e_gets_its_runtime_and_an_explicit_runtime_wins():
  common = ("--config=configs/demo.py", f"--workdir={GCS}", "--zone=us-west4-a",
            f"--repo={REPO}", "--accelerator_type=v5litepod-8", "--steps=create")
  assert "--version=v2-alpha-tpuv5-lite" in _dry_run(*common)[0]
  assert "--version=custom-rt" in _dry_run(*common, "--runtime_version=custom-rt")[0]


@pytest.mark.parametrize("steps, delete_after, expected", [
    (["all"], True, tpu.STEPS),
    (["all"], False, tpu.STEPS[:-1]),
    (["train", "create"], True, ("create", "train")),
    (["logs", "delete"], False, ("logs", "delete")),
])
def test_select_steps_keeps_launch_order_and_deletes_only_when_asked(steps, delete_after,
                                                                     expected):
  assert tpu.select_steps(steps, delete_after) == expected


def test_only_the_selected_steps_are_printed():
  common = ("--config=configs/demo.py", f"--workdir={GCS}", "--zone=us-central2-b",
            f"--repo={REPO}")
  assert [_step(c) for c in _dry_run(*common, "--steps=train,create")] == ["create", "train"]
  assert [_step(c) for c in _dry_run(*common, "--steps=delete")] == ["delete"]


def _sdist(tmp_path, config="configs/demo.py"):
  path = tmp_path / "attnlm_jax-0.1.0.tar.gz"
  member = tmp_path / "member.py"
  member.write_text("")
  with tarfile.open(path, "w:gz") as archive:
    archive.add(member, arcname=f"attnlm_jax-0.1.0/{config}")
  return path


def test_local_source_copies_the_sdist_to_every_worker(tmp_path):
  sdist = _sdist(tmp_path)
  commands = _dry_run("--config=configs/demo.py", f"--workdir={GCS}", "--zone=us-central2-b",
                      "--accelerator_type=v4-32", "--source=local", f"--sdist={sdist}",
                      "--steps=install")
  copy, unpack = commands
  assert copy[:7] == ["gcloud", "compute", "tpus", "tpu-vm", "scp", str(sdist),
                      "attnlm-v4-32:attnlm_jax-0.1.0.tar.gz"]
  assert _option(copy, "--worker") == "all" and _option(unpack, "--worker") == "all"
  words = _shell_words(_option(unpack, "--command"))
  assert words[words.index("tar"):words.index("tar") + 6] == [
      "tar", "-xzf", "attnlm_jax-0.1.0.tar.gz", "-C", "attnlm_jax", "--strip-components=1"]


def test_local_workdir_on_a_single_host_is_fetched_from_worker_0():
  commands = _dry_run("--config=configs/demo.py", "--workdir=workdirs/run1",
                      "--zone=us-central2-b", f"--repo={REPO}", "--fetch_dir=/tmp/out",
                      "--steps=fetch")
  assert commands[1][:8] == ["gcloud", "compute", "tpus", "tpu-vm", "scp", "--recurse",
                             "attnlm-v4-8:attnlm_jax/workdirs/run1", "/tmp/out"]
  assert _option(commands[1], "--worker") == "0"


GOOD = {"config": "configs/demo.py", "workdir": GCS, "zone": "us-central2-b", "repo": REPO}


@pytest.mark.parametrize("change, message", [
    ({"zone": None}, "missing --zone"),
    ({"config": None}, "missing --config"),
    ({"workdir": None}, "missing --workdir"),
    ({"accelerator_type": "v9-8"}, "unknown accelerator family 'v9'"),
    ({"accelerator_type": "v4-12"}, "multiple of 8"),
    ({"accelerator_type": "v4-32", "workdir": "/tmp/run"}, "use --workdir=gs://"),
    ({"workdir": "gs://my-bucket"}, "gs://BUCKET/PATH"),
    ({"workdir": "runs/x", "steps": "create,delete"}, "add fetch to --steps"),
    ({"zone": "central"}, "--zone='central'"),
    ({"name": "Bad_Name"}, "--name='Bad_Name'"),
    ({"spot": "", "preemptible": ""}, "--spot and --preemptible"),
    ({"steps": "create,boot"}, "--steps=create,boot"),
    ({"repo": None}, "missing --repo"),
    ({"source": "local"}, "needs --sdist"),
    ({"source": "local", "sdist": "missing.tar.gz"}, "not an existing .tar.gz"),
    ({"log_worker": "4", "accelerator_type": "v4-32"}, "from 0 to 3"),
    ({"config.model.score": ""}, "has no value"),
    ({"zonee": "x"}, "Unknown command line flag 'zonee'"),
    ({"source": "svn"}, "--source=svn"),
])
def test_bad_flags_fail_with_one_line(change, message):
  settings = {**GOOD, **change}
  args = [f"--{k}" if v == "" else f"--{k}={v}" for k, v in settings.items() if v is not None]
  result = _launch(*args, "--dry_run")
  assert result.returncode != 0
  assert result.stdout == ""
  lines = result.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
  assert message in lines[0]


def test_sdist_without_the_config_is_refused(tmp_path):
  result = _launch("--config=configs/ptb.py", f"--workdir={GCS}", "--zone=us-central2-b",
                   "--source=local", f"--sdist={_sdist(tmp_path)}", "--dry_run")
  assert result.returncode != 0 and "Traceback" not in result.stderr
  assert "does not contain configs/ptb.py" in result.stderr.strip()


@pytest.mark.parametrize("stray, message", [
    (("--config.x", "1"), "error: config override '--config.x' has no value: write "
                          "--config.x=VALUE"),
    (("stray",), "error: unexpected argument 'stray': flags take --name=value, and config "
                 "overrides --config.NAME=VALUE"),
])
def test_stray_positional_argument_is_refused(stray, message):
  result = _launch(*(f"--{k}={v}" for k, v in GOOD.items()), *stray, "--dry_run")
  assert result.returncode != 0 and result.stderr.splitlines() == [message]


def test_a_failing_step_stops_the_run_with_one_line_naming_it(tmp_path):
  calls = tmp_path / "calls.txt"
  gcloud = tmp_path / "gcloud"
  gcloud.write_text(f'#!/bin/sh\necho "$3 $4" >> {calls}\n[ "$4" != ssh ]\n')
  gcloud.chmod(0o755)
  env = {**os.environ, "PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}"}
  result = _launch(*(f"--{k}={v}" for k, v in GOOD.items()), env=env, cwd=tmp_path)
  assert result.returncode != 0
  assert calls.read_text().splitlines() == ["tpu-vm create", "tpu-vm ssh"]
  last = result.stderr.strip().splitlines()[-1]
  assert last.startswith("error: step install failed with exit status 1")
  assert "Traceback" not in result.stderr


def test_missing_gcloud_is_reported_in_one_line(tmp_path):
  env = {**os.environ, "PATH": str(tmp_path)}
  result = _launch(*(f"--{k}={v}" for k, v in GOOD.items()), env=env, cwd=tmp_path)
  assert result.returncode != 0
  assert result.stderr.strip().splitlines()[-1].startswith("error: step create: gcloud is not")


def _run_remote(script, home):
  return subprocess.run(["bash", "-c", script], cwd=home, capture_output=True, text=True,
                        timeout=60, env={**os.environ, "HOME": str(home)})


def test_install_script_clones_the_ref_and_installs_into_a_venv(tmp_path):
  source = tmp_path / "source"
  git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(source)]
  source.mkdir()
  subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
  (source / "marker.txt").write_text("v1")
  subprocess.run([*git, "add", "marker.txt"], check=True)
  subprocess.run([*git, "commit", "-q", "-m", "one"], check=True)
  subprocess.run([*git, "tag", "v1"], check=True)
  (source / "marker.txt").write_text("v2")
  subprocess.run([*git, "commit", "-q", "-am", "two"], check=True)
  home = tmp_path / "home"
  uv = home / ".local" / "bin" / "uv"
  uv.parent.mkdir(parents=True)
  uv.write_text(f'#!/bin/sh\necho "$@" >> {tmp_path}/uv.txt\n')
  uv.chmod(0o755)
  (install,) = _dry_run(*(f"--{k}={v}" for k, v in GOOD.items() if k != "repo"),
                        f"--repo={source}", "--ref=v1", "--steps=install")
  result = _run_remote(_option(install, "--command"), home)
  assert result.returncode == 0, result.stderr
  assert (home / "attnlm_jax" / "marker.txt").read_text() == "v1"
  assert (tmp_path / "uv.txt").read_text().splitlines() == [
      "venv --quiet --python 3.12 attnlm_jax/.venv",
      "pip install --quiet --python attnlm_jax/.venv/bin/python -e attnlm_jax[gcs] "
      "jax[tpu]>=0.10.2,<0.13"]


def test_installing_again_keeps_a_local_run_and_a_running_job(tmp_path):
  home = tmp_path
  run = home / "attnlm_jax" / "runs" / "demo"
  run.mkdir(parents=True)
  (run / "metrics.jsonl").write_text("{}\n")
  (install,) = _dry_run(*(f"--{k}={v}" for k, v in GOOD.items() if k != "workdir"),
                        "--workdir=runs/demo", "--steps=install")
  result = _run_remote(_option(install, "--command"), home)
  assert result.returncode == 1
  assert "attnlm_jax/runs/demo on" in result.stderr and "--steps=fetch" in result.stderr
  assert (run / "metrics.jsonl").read_text() == "{}\n"         # nothing deleted
  (run / "metrics.jsonl").unlink()
  run.rmdir()
  sleeper = subprocess.Popen(["sleep", "30"])
  try:
    (home / "attnlm_jax" / "train.pid").write_text(f"{sleeper.pid}\n")
    result = _run_remote(_option(install, "--command"), home)
    assert result.returncode == 1 and "training is running on" in result.stderr
    assert (home / "attnlm_jax" / "train.pid").exists()
  finally:
    sleeper.kill()
    sleeper.wait()


def test_train_and_logs_scripts_detach_the_job_and_report_its_status(tmp_path):
  home = tmp_path
  python = home / "attnlm_jax" / ".venv" / "bin" / "python"
  python.parent.mkdir(parents=True)
  python.write_text('#!/bin/sh\nfor a in "$@"; do echo "arg: $a"; done\nexit 3\n')
  python.chmod(0o755)
  train, follow, wait = _dry_run(*(f"--{k}={v}" for k, v in GOOD.items()),
                                 "--steps=train,logs", "--config.name=a 'quoted' run")
  assert _run_remote(_option(train, "--command"), home).returncode == 0
  followed = _run_remote(_option(follow, "--command"), home)
  assert followed.returncode == 0
  assert followed.stdout.splitlines() == [
      "arg: -m", "arg: attnlm_jax.main", "arg: --config=configs/demo.py",
      f"arg: --workdir={GCS}", "arg: --config.name=a 'quoted' run"]
  waited = _run_remote(_option(wait, "--command"), home)
  assert waited.returncode == 3
  assert "training exited with status 3" in waited.stderr
