"""Figures saved as PNG files without a display (matplotlib's Agg canvas)."""

from etils import epath
from matplotlib import figure as figure_lib
from matplotlib.backends import backend_agg


def save_figure(fig: figure_lib.Figure, path) -> None:
  """Renders `fig` with the Agg canvas into the PNG file `path` (its folder is created)."""
  path = epath.Path(str(path))
  path.parent.mkdir(parents=True, exist_ok=True)
  backend_agg.FigureCanvasAgg(fig)
  with path.open("wb") as f:
    fig.savefig(f, format="png", dpi=100, bbox_inches="tight")
