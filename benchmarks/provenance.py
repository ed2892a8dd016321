"""Where and how a benchmark ran: the fields every result line of the benchmarks ends with."""

import sys

import jax

from attnlm_jax.common import provenance


def machine_and_command(module: str) -> dict:
  """The backend, its device, the host's CPU model and CPUs, the jax version, and the command
  (`python -m MODULE` with this process's arguments) that printed the line."""
  return {"platform": jax.default_backend(), "device_kind": jax.devices()[0].device_kind,
          "cpu_model": provenance.cpu_model(), "host_cpus": provenance.host_cpus(),
          "jax": jax.__version__, "command": " ".join([f"python -m {module}", *sys.argv[1:]])}
