"""Test-wide settings: two host CPU devices so data-parallel code runs on a CPU machine, and
the corpora read from `../shared/data` when it exists (the configs' data root)."""

import os
import pathlib

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

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
