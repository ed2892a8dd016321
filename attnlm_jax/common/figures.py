"""Figures saved as PNG files without a display (matplotlib's Agg canvas).

matplotlib is imported with the first figure, not with the package: most commands draw
nothing, and importing it would add about a second to each one's start.
"""

from etils import epath


def new_figure(**kwargs):
  """A `matplotlib.figure.Figure(**kwargs)`, outside pyplot (no display, no global state)."""
  from matplotlib import figure as figure_lib  # pylint: disable=g-import-not-at-top
  return figure_lib.Figure(**kwargs)


def save_figure(fig, path) -> None:
  """Renders the Figure `fig` with the Agg canvas into the PNG file `path` (its folder is
  created)."""
  from matplotlib.backends import backend_agg  # pylint: disable=g-import-not-at-top
  path = epath.Path(str(path))
  path.parent.mkdir(parents=True, exist_ok=True)
  backend_agg.FigureCanvasAgg(fig)
  with path.open("wb") as f:
    fig.savefig(f, format="png", dpi=100, bbox_inches="tight")
