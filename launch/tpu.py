r"""Runs attnlm_jax training on a Cloud TPU VM or pod slice with `gcloud compute tpus tpu-vm`.

A launch is six steps; each is a list of commands built by a pure function of a `LaunchSpec`,
so the commands can be printed (`--dry_run`) and tested without gcloud:

  create   gcloud compute tpus tpu-vm create NAME --accelerator-type=... --version=...
  install  on every worker (--worker=all): the project from git (--repo at --ref) or from a
           local sdist (--source=local), `pip install -e` into a Python 3.12 virtualenv made
           by uv (the TPU images ship Python 3.10, too old for jax 0.10), plus jax[tpu]
  train    on every worker at once (--worker=all): `python -m attnlm_jax.main --config=...
           --workdir=... [--config.NAME=VALUE ...]` detached from ssh, output in a log file
  logs     follow one worker's log until its training ends, then wait for every worker
           and fail if any training process exited non-zero
  fetch    copy the workdir (checkpoints, metrics, TensorBoard events) to --fetch_dir
  delete   gcloud compute tpus tpu-vm delete NAME --quiet

Example (prints the commands; drop --dry_run to run them):

  python launch/tpu.py --config=configs/demo.py --workdir=gs://BUCKET/runs/demo \
      --zone=us-central2-b --accelerator_type=v4-8 --repo=https://github.com/OWNER/attnlm_jax \
      --dry_run

Every argument of the form --config.NAME=VALUE is passed through to the training entry point.
launch/README.md has worked examples for a single host and for a pod slice.
"""

from __future__ import annotations

import dataclasses
import os
import posixpath
import re
import shlex
import subprocess
import sys
import tarfile
from collections.abc import Callable, Sequence

from absl import app
from absl import flags

STEPS = ("create", "install", "train", "logs", "fetch", "delete")
# The workers' JAX: the range setup.py admits, with the TPU runtime (libtpu) it pulls in.
JAX_SPEC = "jax[tpu]>=0.10.2,<0.13"

# The TPU software version to create each accelerator family with
# (https://cloud.google.com/tpu/docs/runtimes).
RUNTIME_VERSIONS = {
    "v2": "tpu-ubuntu2204-base",
    "v3": "tpu-ubuntu2204-base",
    "v4": "tpu-ubuntu2204-base",
    "v5litepod": "v2-alpha-tpuv5-lite",
    "v5p": "v2-alpha-tpuv5",
    "v6e": "v2-alpha-tpuv6e",
}
# Families whose accelerator-type size counts TensorCores (8 per host); the others count chips
# (up to 8 on one host, 4 per host in a multi-host slice).
_CORE_COUNTED = ("v2", "v3", "v4", "v5p")

# Files the training job leaves in the project directory on each worker.
TRAIN_LOG, TRAIN_PID, TRAIN_RC = "train.log", "train.pid", "train.rc"
_UV = "$HOME/.local/bin/uv"
_UV_INSTALLER = "https://astral.sh/uv/install.sh"
_VENV = ".venv"

_NAME_RE = re.compile(r"[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?")
_ZONE_RE = re.compile(r"[a-z]+-[a-z]+[0-9]+-[a-z]")
_ACCELERATOR_RE = re.compile(r"([a-z0-9]+)-([0-9]+)")
_GCS_RE = re.compile(r"gs://[a-z0-9][-a-z0-9_.]*[a-z0-9]/.+")
_REMOTE_DIR_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*")


class LaunchError(ValueError):
  """A bad flag or a failed step; the message is one line saying what to change."""


@dataclasses.dataclass(frozen=True)
class LaunchSpec:
  """Everything the commands are built from: a field per command-line flag, but for
  `--dry_run` (print instead of run) and `--delete_after` (folded into `steps`)."""

  config: str
  workdir: str
  zone: str
  accelerator_type: str = "v4-8"
  name: str = ""
  runtime_version: str = ""
  project: str = ""
  spot: bool = False
  preemptible: bool = False
  overrides: tuple[str, ...] = ()
  source: str = "git"
  repo: str = ""
  ref: str = "main"
  sdist: str = ""
  remote_dir: str = "attnlm_jax"
  python_version: str = "3.12"
  jax_spec: str = JAX_SPEC
  fetch_dir: str = "workdirs"
  log_worker: str = "0"
  steps: tuple[str, ...] = STEPS

  @property
  def tpu_name(self) -> str:
    """The TPU VM's name: --name, or `attnlm-<accelerator type>`."""
    return self.name or f"attnlm-{self.accelerator_type}"

  @property
  def runtime(self) -> str:
    """The TPU software version: --runtime_version, or the family's default."""
    return self.runtime_version or default_runtime_version(self.accelerator_type)


def parse_accelerator(accelerator_type: str) -> tuple[str, int]:
  """Splits `v4-32` into ('v4', 32), checking the family and the size."""
  match = _ACCELERATOR_RE.fullmatch(accelerator_type)
  if not match:
    raise LaunchError(f"--accelerator_type={accelerator_type!r} is not FAMILY-SIZE: "
                      "use e.g. v4-8, v5litepod-8 or v4-32")
  family, size = match.group(1), int(match.group(2))
  if family not in RUNTIME_VERSIONS:
    raise LaunchError(f"unknown accelerator family {family!r} in --accelerator_type="
                      f"{accelerator_type}: use one of {', '.join(RUNTIME_VERSIONS)}")
  if family in _CORE_COUNTED:
    if size < 8 or size % 8:
      raise LaunchError(f"--accelerator_type={accelerator_type}: {family} sizes count "
                        f"TensorCores, a multiple of 8 ({family}-8 is one host)")
  elif not (size in (1, 4, 8) or (size >= 16 and size % 4 == 0)):
    raise LaunchError(f"--accelerator_type={accelerator_type}: {family} sizes count chips, "
                      "1, 4 or 8 on one host, or a multiple of 4 from 16")
  return family, size


def num_hosts(accelerator_type: str) -> int:
  """The number of TPU VM workers (hosts) of an accelerator type, e.g. 4 for v4-32."""
  family, size = parse_accelerator(accelerator_type)
  if family in _CORE_COUNTED:
    return size // 8
  return 1 if size <= 8 else size // 4


def default_runtime_version(accelerator_type: str) -> str:
  """The TPU software version to create `accelerator_type` with when none is given."""
  return RUNTIME_VERSIONS[parse_accelerator(accelerator_type)[0]]


def is_gcs(path: str) -> bool:
  """Whether `path` is a Cloud Storage URL (shared by every worker)."""
  return path.startswith("gs://")


def select_steps(requested: Sequence[str], delete_after: bool) -> tuple[str, ...]:
  """The steps to run, in launch order.

  `all` means every step, `delete` included only when `delete_after`; a step named
  explicitly always runs.
  """
  unknown = [step for step in requested if step not in (*STEPS, "all")]
  if unknown or not requested:
    raise LaunchError(f"--steps={','.join(requested)}: use all or a comma-separated list "
                      f"of {', '.join(STEPS)}")
  wanted = set(requested)
  if "all" in wanted:
    wanted.update(STEPS if delete_after else STEPS[:-1])
  return tuple(step for step in STEPS if step in wanted)


def split_overrides(args: Sequence[str]) -> tuple[list[str], list[str]]:
  """Separates the `--config.NAME=VALUE` overrides for training from the launcher's flags."""
  rest, overrides = [], []
  for arg in args:
    if not arg.startswith("--config."):
      rest.append(arg)
    elif "=" not in arg:
      raise LaunchError(f"config override {arg!r} has no value: write {arg}=VALUE")
    else:
      overrides.append(arg)
  return rest, overrides


def _config_file(config: str) -> str:
  """The file part of a config argument (`configs/ptb.py:score=single` -> configs/ptb.py)."""
  return config.split(":", 1)[0]


def _check_sdist(sdist: str, config: str) -> None:
  """Checks that `sdist` is a readable source archive holding the config file."""
  if not sdist:
    raise LaunchError("--source=local needs --sdist=dist/attnlm_jax-VERSION.tar.gz "
                      "(build it with: python setup.py sdist)")
  if not sdist.endswith(".tar.gz") or not os.path.isfile(sdist):
    raise LaunchError(f"--sdist={sdist} is not an existing .tar.gz file: build it with "
                      "python setup.py sdist")
  try:
    with tarfile.open(sdist, "r:gz") as archive:
      members = {name.split("/", 1)[-1] for name in archive.getnames()}
  except (tarfile.TarError, OSError) as e:
    raise LaunchError(f"--sdist={sdist} cannot be read as a gzip tarball ({e}): "
                      "rebuild it with python setup.py sdist") from None
  wanted = posixpath.normpath(_config_file(config))
  if wanted not in members:
    raise LaunchError(f"--sdist={sdist} does not contain {wanted}: add 'graft configs' to "
                      "MANIFEST.in and rebuild it")


def validate(spec: LaunchSpec) -> None:
  """Raises LaunchError (one line, naming the flag) for a spec that cannot be launched."""
  if not spec.config:
    raise LaunchError("missing --config: pass a config file of the project, "
                      "e.g. --config=configs/demo.py")
  if posixpath.isabs(_config_file(spec.config)):
    raise LaunchError(f"--config={spec.config} is absolute: pass the path inside the project "
                      "(e.g. configs/demo.py); it is read in the project directory on each worker")
  if not spec.workdir:
    raise LaunchError("missing --workdir: pass a Cloud Storage directory, "
                      "e.g. --workdir=gs://BUCKET/runs/demo")
  if not spec.zone:
    raise LaunchError("missing --zone: pass a zone with TPU quota, e.g. --zone=us-central2-b")
  if not _ZONE_RE.fullmatch(spec.zone):
    raise LaunchError(f"--zone={spec.zone!r} is not a zone name such as us-central2-b")
  hosts = num_hosts(spec.accelerator_type)
  if not _NAME_RE.fullmatch(spec.tpu_name):
    raise LaunchError(f"--name={spec.tpu_name!r} is not a valid TPU name: use lower-case "
                      "letters, digits and hyphens, starting with a letter, at most 63")
  if spec.spot and spec.preemptible:
    raise LaunchError("--spot and --preemptible exclude each other: pass one of them "
                      "(spot is the newer kind, without the 24-hour limit)")
  if is_gcs(spec.workdir):
    if not _GCS_RE.fullmatch(spec.workdir):
      raise LaunchError(f"--workdir={spec.workdir} is not gs://BUCKET/PATH: add a directory "
                        "inside the bucket, e.g. gs://BUCKET/runs/demo")
  elif hosts > 1:
    raise LaunchError(f"--workdir={spec.workdir} is a local path, but {spec.accelerator_type} "
                      f"has {hosts} hosts that do not share disks: use --workdir=gs://BUCKET/PATH")
  elif "delete" in spec.steps and "fetch" not in spec.steps:
    raise LaunchError(f"--workdir={spec.workdir} is on the TPU VM's disk and would be deleted "
                      "with it: add fetch to --steps, use gs://, or keep the VM (delete left out "
                      "of --steps; with --steps=all, --nodelete_after)")
  if spec.source == "git":
    if not spec.repo:
      raise LaunchError("missing --repo: pass the project's git URL (e.g. --repo=https://"
                        "github.com/OWNER/attnlm_jax), or use --source=local --sdist=...")
  elif spec.source == "local":
    _check_sdist(spec.sdist, spec.config)
  else:
    raise LaunchError(f"--source={spec.source!r}: use git or local")
  if not _REMOTE_DIR_RE.fullmatch(spec.remote_dir):
    raise LaunchError(f"--remote_dir={spec.remote_dir!r}: use a plain directory name such "
                      "as attnlm_jax (it is created in the home directory of each worker)")
  if spec.log_worker != "all" and not (spec.log_worker.isdigit()
                                       and int(spec.log_worker) < hosts):
    raise LaunchError(f"--log_worker={spec.log_worker}: use all or a worker index from 0 to "
                      f"{hosts - 1} ({spec.accelerator_type} has {hosts} hosts)")
  split_overrides(spec.overrides)
  select_steps(spec.steps, delete_after=False)


def _tpu_command(spec: LaunchSpec, verb: str, *args: str) -> list[str]:
  """`gcloud compute tpus tpu-vm VERB ARGS --zone=... [--project=...]`."""
  command = ["gcloud", "compute", "tpus", "tpu-vm", verb, *args, f"--zone={spec.zone}"]
  if spec.project:
    command.append(f"--project={spec.project}")
  return command


def _ssh(spec: LaunchSpec, worker: str, script: str) -> list[str]:
  """Runs the shell `script` on one worker (`0`, `1`, ...) or on every worker (`all`)."""
  return _tpu_command(spec, "ssh", spec.tpu_name, f"--worker={worker}", f"--command={script}")


def create_commands(spec: LaunchSpec) -> list[list[str]]:
  """Creates the TPU VM or pod slice."""
  command = _tpu_command(spec, "create", spec.tpu_name,
                         f"--accelerator-type={spec.accelerator_type}",
                         f"--version={spec.runtime}")
  if spec.spot:
    command.append("--spot")
  if spec.preemptible:
    command.append("--preemptible")
  return [command]


def install_commands(spec: LaunchSpec) -> list[list[str]]:
  """Puts the project in `remote_dir` on every worker and installs it with jax[tpu].

  The TPU images ship Python 3.10 and jax 0.10 needs 3.11 or later, so the project goes into
  a virtualenv `remote_dir/.venv` with a Python that uv downloads. Installing again replaces
  `remote_dir`, so a worker refuses while its training runs, or while `remote_dir` holds the
  run of a relative local --workdir.
  """
  directory = spec.remote_dir
  quoted = shlex.quote(directory)
  guards = [f'if [ -f {quoted}/{TRAIN_PID} ] && kill -0 "$(cat {quoted}/{TRAIN_PID})" '
            f'2>/dev/null; then echo "training is running on $(hostname): wait for it '
            f'(--steps=logs) before installing again" >&2; exit 1; fi']
  if not is_gcs(spec.workdir) and not posixpath.isabs(spec.workdir):
    run = shlex.quote(posixpath.join(directory, spec.workdir))
    guards.append(f'if [ -e {run} ]; then echo "{run} on $(hostname) holds a run that '
                  f'installing again would delete: fetch it (--steps=fetch) and move it '
                  f'aside, or train without install (--steps=train,logs)" >&2; exit 1; fi')
  copies = []
  if spec.source == "git":
    get_source = [shlex.join(["rm", "-rf", directory]),
                  shlex.join(["git", "clone", "--quiet", spec.repo, directory]),
                  shlex.join(["git", "-C", directory, "checkout", "--quiet", spec.ref])]
  else:
    archive = os.path.basename(spec.sdist)
    copies.append(_tpu_command(spec, "scp", spec.sdist, f"{spec.tpu_name}:{archive}",
                               "--worker=all"))
    get_source = [shlex.join(["rm", "-rf", directory]),
                  shlex.join(["mkdir", directory]),
                  shlex.join(["tar", "-xzf", archive, "-C", directory, "--strip-components=1"])]
  venv = posixpath.join(directory, _VENV)
  setup = [
      f"{{ [ -x {_UV} ] || curl -LsSf {_UV_INSTALLER} | env UV_NO_MODIFY_PATH=1 sh; }}",
      f"{_UV} venv --quiet --python {shlex.quote(spec.python_version)} {shlex.quote(venv)}",
      f"{_UV} pip install --quiet --python {shlex.quote(posixpath.join(venv, 'bin', 'python'))}"
      f" -e {shlex.quote(directory + '[gcs]')} {shlex.quote(spec.jax_spec)}",
  ]
  return copies + [_ssh(spec, "all", "; ".join(guards + [" && ".join(get_source + setup)]))]


def train_argv(spec: LaunchSpec) -> list[str]:
  """The training command each worker runs inside the project directory."""
  return ["env", "PYTHONUNBUFFERED=1", posixpath.join(_VENV, "bin", "python"), "-m",
          "attnlm_jax.main", f"--config={spec.config}", f"--workdir={spec.workdir}",
          *spec.overrides]


def train_commands(spec: LaunchSpec) -> list[list[str]]:
  """Starts training on every worker at once, in the background, output in TRAIN_LOG.

  The job ignores SIGHUP (as under nohup), so it outlives the ssh session. Its pid goes to
  TRAIN_PID and its exit status to TRAIN_RC, for the logs step; a worker whose previous job
  still runs refuses to start another.
  """
  job = f"trap '' HUP; {shlex.join(train_argv(spec))}; echo $? > {TRAIN_RC}"
  script = "; ".join([
      f"cd {shlex.quote(spec.remote_dir)} || exit 1",
      f'if [ -f {TRAIN_PID} ] && kill -0 "$(cat {TRAIN_PID})" 2>/dev/null; then '
      f'echo "training already running on $(hostname)" >&2; exit 1; fi',
      f"rm -f {TRAIN_RC}",
      f"( {job} ) > {TRAIN_LOG} 2>&1 < /dev/null & echo $! > {TRAIN_PID}",
  ])
  return [_ssh(spec, "all", script)]


def logs_commands(spec: LaunchSpec) -> list[list[str]]:
  """Follows `log_worker`'s log until its job ends; then waits for every worker's job.

  The second command fails (naming the host) when any worker's training exited non-zero.
  Interrupting either leaves training running; `--steps=logs` reattaches.
  """
  directory = shlex.quote(spec.remote_dir)
  follow = f'cd {directory} && tail -n +1 -f --pid="$(cat {TRAIN_PID})" {TRAIN_LOG}'
  wait = (f'cd {directory} && while kill -0 "$(cat {TRAIN_PID})" 2>/dev/null; do sleep 10; '
          f'done; rc="$(cat {TRAIN_RC} 2>/dev/null || echo 1)"; [ "$rc" = 0 ] || echo '
          f'"training exited with status $rc on $(hostname), see {spec.remote_dir}/{TRAIN_LOG}"'
          f' >&2; exit "$rc"')
  return [_ssh(spec, spec.log_worker, follow), _ssh(spec, "all", wait)]


def fetched_workdir(spec: LaunchSpec) -> str:
  """Where the fetch step puts the workdir: `fetch_dir/<last part of workdir>`."""
  return os.path.join(spec.fetch_dir, posixpath.basename(spec.workdir.rstrip("/")))


def fetch_commands(spec: LaunchSpec) -> list[list[str]]:
  """Copies the workdir to `fetch_dir`: from Cloud Storage, or from worker 0's disk."""
  mkdir = ["mkdir", "-p", spec.fetch_dir]
  if is_gcs(spec.workdir):
    return [mkdir, ["gcloud", "storage", "cp", "--recursive", spec.workdir, spec.fetch_dir]]
  remote = posixpath.join(spec.remote_dir, spec.workdir)
  return [mkdir, _tpu_command(spec, "scp", "--recurse", f"{spec.tpu_name}:{remote}",
                              spec.fetch_dir, "--worker=0")]


def delete_commands(spec: LaunchSpec) -> list[list[str]]:
  """Deletes the TPU VM without asking."""
  return [_tpu_command(spec, "delete", spec.tpu_name, "--quiet")]


_BUILDERS: dict[str, Callable[[LaunchSpec], list[list[str]]]] = {
    "create": create_commands,
    "install": install_commands,
    "train": train_commands,
    "logs": logs_commands,
    "fetch": fetch_commands,
    "delete": delete_commands,
}


def build_plan(spec: LaunchSpec) -> list[tuple[str, list[str]]]:
  """Validates `spec` and returns (step, argv) for every command of its steps, in order."""
  validate(spec)
  return [(step, command) for step in STEPS if step in spec.steps
          for command in _BUILDERS[step](spec)]


def tensorboard_hint(spec: LaunchSpec) -> str:
  """The command that shows the run's TensorBoard logs."""
  if "fetch" in spec.steps:
    return f"tensorboard --logdir={shlex.quote(fetched_workdir(spec))}"
  if is_gcs(spec.workdir):
    return f"tensorboard --logdir={spec.workdir}"
  return f"the workdir is on {spec.tpu_name}: add fetch to --steps to copy it here"


def run_plan(plan: Sequence[tuple[str, list[str]]],
             run: Callable[[list[str]], int] = subprocess.call) -> None:
  """Runs the commands in order, echoing each to stderr; stops at the first failure."""
  for step, command in plan:
    print(f"+ {shlex.join(command)}", file=sys.stderr, flush=True)
    try:
      status = run(command)
    except FileNotFoundError:
      raise LaunchError(f"step {step}: {command[0]} is not on PATH; install the Google Cloud "
                        "CLI (https://cloud.google.com/sdk/docs/install)") from None
    if status != 0:
      raise LaunchError(f"step {step} failed with exit status {status}; fix it and rerun from "
                        f"this step with --steps, or free the TPU VM with --steps=delete")


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
  """Defines the launcher's command-line flags (only when it runs as a script)."""
  define = dict(flag_values=flag_values)
  flags.DEFINE_string("config", None, "Config file inside the project, read on each worker "
                      "(e.g. configs/demo.py or configs/ptb.py:score=single).", **define)
  flags.DEFINE_string("workdir", None, "Training workdir; gs://BUCKET/PATH (required for a "
                      "multi-host slice), or a path on a single host's disk (a relative one is "
                      "inside --remote_dir, where training runs on worker 0).", **define)
  flags.DEFINE_string("zone", None, "Zone of the TPU, e.g. us-central2-b.", **define)
  flags.DEFINE_string("project", "", "Google Cloud project; default: gcloud's.", **define)
  flags.DEFINE_string("name", "", "TPU VM name; default: attnlm-ACCELERATOR_TYPE.", **define)
  flags.DEFINE_string("accelerator_type", "v4-8", "TPU type, e.g. v4-8, v5litepod-8, v4-32.",
                      **define)
  flags.DEFINE_string("runtime_version", "", "TPU software version; default per family: "
                      + ", ".join(f"{k}={v}" for k, v in RUNTIME_VERSIONS.items()), **define)
  flags.DEFINE_bool("spot", False, "Create a Spot TPU (preemptible, no time limit).", **define)
  flags.DEFINE_bool("preemptible", False, "Create a preemptible TPU (24-hour limit).", **define)
  flags.DEFINE_enum("source", "git", ["git", "local"], "Install from git (--repo at --ref) or "
                    "from a local sdist (--sdist).", **define)
  flags.DEFINE_string("repo", "", "Git URL of the project (for --source=git).", **define)
  flags.DEFINE_string("ref", "main", "Branch, tag or commit to check out.", **define)
  flags.DEFINE_string("sdist", "", "Source archive to copy (for --source=local).", **define)
  flags.DEFINE_string("remote_dir", "attnlm_jax", "Project directory in each worker's home; "
                      "the install step recreates it.", **define)
  flags.DEFINE_string("python_version", "3.12", "Python of the workers' virtualenv.", **define)
  flags.DEFINE_string("jax_spec", JAX_SPEC, "pip requirement for JAX on TPU.",
                      **define)
  flags.DEFINE_string("fetch_dir", "workdirs", "Local directory the workdir is copied into.",
                      **define)
  flags.DEFINE_string("log_worker", "0", "Worker whose log the logs step follows (or all).",
                      **define)
  flags.DEFINE_list("steps", ["all"], "Steps to run, in launch order: all or some of "
                    + ",".join(STEPS) + ".", **define)
  flags.DEFINE_bool("delete_after", True, "With --steps=all, delete the TPU VM at the end.",
                    **define)
  flags.DEFINE_bool("dry_run", False, "Print the commands, one per line, without running them.",
                    **define)


def spec_from_flags(flag_values: flags.FlagValues, overrides: Sequence[str]) -> LaunchSpec:
  """Builds the LaunchSpec from parsed flags and the pass-through config overrides."""
  f = flag_values
  return LaunchSpec(
      config=f.config or "", workdir=(f.workdir or "").rstrip("/"), zone=f.zone or "",
      accelerator_type=f.accelerator_type, name=f.name, runtime_version=f.runtime_version,
      project=f.project, spot=f.spot, preemptible=f.preemptible, overrides=tuple(overrides),
      source=f.source, repo=f.repo, ref=f.ref, sdist=f.sdist, remote_dir=f.remote_dir,
      python_version=f.python_version, jax_spec=f.jax_spec, fetch_dir=f.fetch_dir,
      log_worker=f.log_worker, steps=select_steps(f.steps, f.delete_after))


def _fail(message: str) -> None:
  """Exits non-zero with `error: message` on one line."""
  sys.exit("error: " + " ".join(message.split()))


def parse_flags(argv: list[str]) -> list[str]:
  """absl flags parser: parses the launcher's flags, returns the config overrides."""
  try:
    rest, overrides = split_overrides(argv[1:])
    positional = flags.FLAGS([argv[0], *rest])
  except (LaunchError, flags.Error) as e:
    _fail(str(e))
  if len(positional) > 1:
    _fail(f"unexpected argument {positional[1]!r}: flags take --name=value, and config "
          "overrides --config.NAME=VALUE")
  return overrides


def main(overrides: list[str]) -> None:
  """Prints (--dry_run) or runs the launch commands."""
  try:
    spec = spec_from_flags(flags.FLAGS, overrides)
    plan = build_plan(spec)
    if flags.FLAGS.dry_run:
      for _, command in plan:
        print(shlex.join(command))
    else:
      run_plan(plan)
    if "fetch" in spec.steps or "train" in spec.steps:
      print(f"TensorBoard: {tensorboard_hint(spec)}", file=sys.stderr)
  except LaunchError as e:
    _fail(str(e))


if __name__ == "__main__":
  define_flags()
  app.run(main, flags_parser=parse_flags)
