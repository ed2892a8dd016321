"""Joining the processes of a multi-host run before JAX is used: from
`--coordinator_address/--num_processes/--process_id`, or from the environment on Cloud TPU,
Slurm and Open MPI (docs/multihost.md)."""

import socket
import time
from typing import Optional

from absl import logging
import jax

from attnlm_jax.common import errors

# What jax.distributed.initialize() raises when no cluster environment is detected.
_NO_CLUSTER = "coordinator_address should be defined"
# How long a process other than 0 waits for the coordinator to accept a connection (JAX's own
# wait, after which it aborts the process with a stack trace).
COORDINATOR_WAIT_S = 300.0


class DistributedError(errors.UserError):
  """Multi-process flags that cannot start a run."""


def initialize(coordinator_address: Optional[str] = None,
               num_processes: Optional[int] = None,
               process_id: Optional[int] = None) -> None:
  """Joins the processes of a multi-process run; call before any other use of JAX.

  Args:
    coordinator_address: "host:port" of process 0 (which serves it), or None.
    num_processes: the number of processes, or None.
    process_id: this process's index in [0, num_processes), or None.

  With all three None, JAX's own detection decides (Cloud TPU, Slurm, Open MPI); when it
  finds no cluster the run stays one process.

  Raises:
    DistributedError: only some of the three given, a process_id out of range, an address
      that is not HOST:PORT, a coordinator that accepts no connection within
      COORDINATOR_WAIT_S (seen by the other processes), or a cluster environment JAX cannot
      complete.
  """
  given = {"--coordinator_address": coordinator_address, "--num_processes": num_processes,
           "--process_id": process_id}
  if all(value is None for value in given.values()):
    try:
      jax.distributed.initialize()
    except ValueError as e:
      if _NO_CLUSTER not in str(e):
        raise DistributedError(f"jax.distributed.initialize() failed: {e} Pass "
                               "--coordinator_address, --num_processes and --process_id") from e
      return  # No cluster: one process.
  else:
    missing = [name for name, value in given.items() if value is None]
    if missing:
      raise DistributedError(f"{', '.join(missing)} missing: a multi-process run needs "
                             "--coordinator_address, --num_processes and --process_id together")
    if not 0 <= process_id < num_processes:
      raise DistributedError(f"--process_id={process_id} is out of range: use 0 to "
                             f"{num_processes - 1} for --num_processes={num_processes}")
    host, port = _host_and_port(coordinator_address)
    if process_id != 0:
      _wait_for_coordinator(host, port, coordinator_address)
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=coordinator_address,
                               num_processes=num_processes, process_id=process_id)
  if jax.process_count() > 1:
    logging.info("process %d of %d, %d local devices of %d", jax.process_index(),
                 jax.process_count(), jax.local_device_count(), jax.device_count())


def _host_and_port(address: str) -> tuple[str, int]:
  """(host, port) of "HOST:PORT" ("[IPv6]:PORT" too); DistributedError otherwise."""
  host, _, port = address.rpartition(":")
  if not host or not port.isdigit() or not 0 < int(port) < 65536:
    raise DistributedError(f"--coordinator_address={address} is not HOST:PORT: give process "
                           "0's host and a free port, e.g. --coordinator_address=10.0.0.1:1234")
  return host.removeprefix("[").removesuffix("]"), int(port)


def _wait_for_coordinator(host: str, port: int, address: str) -> None:
  """Returns once the coordinator accepts a TCP connection; DistributedError when it has not
  within COORDINATOR_WAIT_S (JAX would abort the process with a stack trace)."""
  deadline = time.monotonic() + COORDINATOR_WAIT_S
  while True:
    try:
      socket.create_connection((host, port), timeout=5.0).close()
      return
    except OSError as e:
      if time.monotonic() >= deadline:
        raise DistributedError(
            f"no coordinator at --coordinator_address={address} after "
            f"{COORDINATOR_WAIT_S:g} s ({e.strerror or e}): start process 0, which serves it, "
            "or give its host and port") from e
      time.sleep(1.0)
