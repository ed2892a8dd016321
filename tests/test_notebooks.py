"""The notebooks run top to bottom on a tiny config and draw their figures; in git they are
stored without outputs and carry the Colab badge and setup cell."""

import os

import nbclient
import nbformat
import pytest

import tiny_config

pytestmark = pytest.mark.slow  # Each notebook runs in a kernel of its own.

NOTEBOOK_DIR = tiny_config.REPO / "notebooks"
# Run in this order: the later ones reuse the runs of the earlier ones (each would train
# what it misses when run alone).
NOTEBOOKS = ("quickstart", "attention_analysis", "reproduce_tables", "testtime")
COLAB_URL = "https://colab.research.google.com/github/attnlm-jax/attnlm_jax/blob/main/notebooks/"


def _read(name: str) -> nbformat.NotebookNode:
  return nbformat.read(NOTEBOOK_DIR / f"{name}.ipynb", as_version=4)


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_stored_notebook_is_stripped_and_opens_in_colab(name):
  notebook = _read(name)
  nbformat.validate(notebook)
  code = [cell for cell in notebook.cells if cell.cell_type == "code"]
  assert all(cell.outputs == [] and cell.execution_count is None for cell in code)
  assert f"{COLAB_URL}{name}.ipynb" in notebook.cells[0].source
  setup = code[0].source
  assert 'IN_COLAB = "google.colab" in sys.modules' in setup
  assert "  !pip install -q git+https://github.com/attnlm-jax/attnlm_jax" in setup
  assert notebook.metadata.kernelspec.name == "python3"


@pytest.fixture(scope="module")
def kernel_env(tmp_path_factory):
  """The environment of the notebooks' kernel: smoke mode, one shared runs directory."""
  saved = dict(os.environ)
  root = tiny_config.REPO
  os.environ.update({
      "ATTNLM_NOTEBOOK_SMOKE": "1",
      "ATTNLM_NOTEBOOK_WORKDIR": str(tmp_path_factory.mktemp("notebook_runs")),
      "PYTHONPATH": os.pathsep.join(filter(None, [str(root), saved.get("PYTHONPATH")])),
      "JAX_PLATFORMS": "cpu", "CI": "1"})
  yield os.environ["ATTNLM_NOTEBOOK_WORKDIR"]
  os.environ.clear()
  os.environ.update(saved)


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_runs_and_draws_its_figures(name, kernel_env):
  notebook = _read(name)
  nbclient.NotebookClient(notebook, timeout=300, kernel_name="python3",
                          resources={"metadata": {"path": str(NOTEBOOK_DIR)}}).execute()
  images = [output for cell in notebook.cells if cell.cell_type == "code"
            for output in cell.outputs if "image/png" in output.get("data", {})]
  expected = {"quickstart": 1, "attention_analysis": 3, "reproduce_tables": 1, "testtime": 1}[name]
  assert len(images) == expected
  errors = [output for cell in notebook.cells if cell.cell_type == "code"
            for output in cell.outputs if output.output_type == "error"]
  assert not errors
