"""Where and with what a run trains: the host's CPUs, the libraries' versions and the code's
commit, as a run's start record names them (docs/reproduce.md) and the benchmarks' results
do."""

import contextlib
import importlib.metadata
import os
import platform
import subprocess

from attnlm_jax.common import checkout

CODE_PATHS = ("attnlm_jax", "configs", "setup.py")  # What a change of marks a code_version.


def host_cpus() -> int:
  """The CPUs this process may run on: its affinity mask (`taskset -c`), else the host's.

  XLA sizes its CPU thread pool by it, and the pool's size can change the order in which a
  matmul's float32 products are summed: a CPU run is reproduced bitwise with the same number.
  """
  if hasattr(os, "sched_getaffinity"):
    return len(os.sched_getaffinity(0))
  return os.cpu_count() or 1


def cpu_model() -> str:
  """The CPU's model name (/proc/cpuinfo), else the platform's processor string: a CPU
  run's speed, and the last bits of its float32 sums, depend on it."""
  with contextlib.suppress(OSError), open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
    for line in cpuinfo:
      if line.startswith("model name"):
        return line.split(":", 1)[1].strip()
  return platform.processor()


# The CPU's vector extensions that XLA compiles for (flag prefixes in /proc/cpuinfo).
VECTOR_EXTENSIONS = ("sse", "avx", "fma", "f16c", "amx")


def cpu_features() -> str:
  """The CPU's vector extensions (/proc/cpuinfo's flags, `VECTOR_EXTENSIONS`), space-separated
  and sorted, else "": XLA compiles a CPU program for them, so two CPUs with one model name
  (a virtual machine's "AMD EPYC") sum float32 alike only when these agree too."""
  with contextlib.suppress(OSError), open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
    for line in cpuinfo:
      if line.startswith("flags"):
        return " ".join(sorted(flag for flag in line.split(":", 1)[1].split()
                               if flag.startswith(VECTOR_EXTENSIONS)))
  return ""


# The libraries whose versions a run's start record names.
LIBRARIES = ("jax", "jaxlib", "flax", "optax", "orbax-checkpoint", "numpy")


def library_versions() -> dict[str, str]:
  """{library: installed version} of `LIBRARIES` (those not installed left out)."""
  versions = {}
  for name in LIBRARIES:
    with contextlib.suppress(importlib.metadata.PackageNotFoundError):
      versions[name] = importlib.metadata.version(name)
  return versions


def code_version() -> str:
  """The code a run trains with: the git commit of the checkout `attnlm_jax` is imported from,
  with "+changes" when its tracked code (`CODE_PATHS`) differs from that commit, else the
  installed package's "attnlm_jax==VERSION". A rerun repeats a run bit for bit only with the
  same code: a change in how dropout masks are drawn, say, changes every step after it. Other
  files (docs, the results pages a run in progress rewrites) do not mark it."""
  source = os.fspath(checkout.REPOSITORY)

  def git(*args: str) -> str:
    return subprocess.run(["git", "-C", source, *args], capture_output=True, text=True,
                          check=True, timeout=30).stdout.strip()

  with contextlib.suppress(OSError, subprocess.SubprocessError):
    if os.path.samefile(git("rev-parse", "--show-toplevel"), source):
      changed = git("status", "--porcelain", "--untracked-files=no", "--", *CODE_PATHS)
      return git("rev-parse", "HEAD") + ("+changes" if changed else "")
  try:
    return f"attnlm_jax=={importlib.metadata.version('attnlm_jax')}"
  except importlib.metadata.PackageNotFoundError:
    return "attnlm_jax (not installed, no git checkout)"
