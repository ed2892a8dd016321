"""Test-wide settings: two host CPU devices so data-parallel code runs on a CPU machine, one
persistent XLA compilation cache, and the corpora read from `../shared/data` when it exists
(the configs' data root)."""

import getpass
import os
import pathlib
import tempfile

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# Most tests compile the same tiny models' steps, many in processes of their own (training
# runs, kills and resumes): one compilation cache for the session's workers and every process
# they start compiles each program once. A cached program is the compiled program itself, so
# no result changes. A size limit turns on the cache's file lock (the `filelock` package of
# the test extra), so that no process reads an entry another is still writing; as every write
# then lists the whole cache, only programs that took half a second or more to compile (the
# steps) go in.
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", str(
    pathlib.Path(tempfile.gettempdir()) / f"attnlm_jax_tests_xla_cache_{getpass.getuser()}"))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.5")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")
os.environ.setdefault("JAX_COMPILATION_CACHE_MAX_SIZE", str(4 << 30))

import pytest  # noqa: E402

SHARED_DATA = pathlib.Path(__file__).resolve().parents[1].parent / "shared" / "data"
if SHARED_DATA.is_dir():
  os.environ["ATTNLM_DATA_DIR"] = str(SHARED_DATA)


@pytest.fixture(scope="session")
def shared_data():
  """The real corpora beside the project (`../shared/data`); skips the test when absent."""
  if not SHARED_DATA.is_dir():
    pytest.skip(f"{SHARED_DATA} not present")
  return SHARED_DATA
