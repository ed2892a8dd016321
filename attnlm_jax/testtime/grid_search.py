"""Grid search for the test-time methods, extended past the edges its best point lies on.

`search(score, axes)` evaluates every point of the product of `axes` (the first axis slowest);
while the best point (lowest perplexity) lies on an edge, it evaluates one step past it, and
where every point diverged it first steps past the `retreat` edge. The rules:
docs/testtime.md, "Past the edges of a grid".
"""

import itertools
import math
from typing import Callable, Mapping, Sequence

# Steps past each edge of an axis, unless the caller gives another number (0: the grid only).
EXTENSIONS = 3
# The largest value an axis may take where one exists: the cache weight lambda (< 1) and
# the decay of dynamic evaluation towards the trained weights (1 resets them every window).
UPPER = {"lambda": 0.9, "decay": 1.0}


def _beyond(values: Sequence[float], side: int, upper: float) -> float | None:
  """The next value past the edge of sorted `values` on `side` (+1 top, -1 bottom), or
  None where the edge is a bound."""
  edge, neighbour = (values[-1], values[-2]) if side > 0 else (values[0], values[1])
  if side < 0 and edge <= 0 or side > 0 and edge >= upper:
    return None
  step = edge * edge / neighbour if neighbour > 0 else 2 * edge - neighbour
  step = float(f"{step:.2g}")
  return min(step, upper) if side > 0 else step


def _retreat(grid: list[dict], axes: Mapping[str, Sequence[float]],
             retreat: tuple[str, int] | None, steps: dict, extensions: int) -> list[dict]:
  """The points of the next step past the `retreat` edge, one at each value of the other
  axes (counted in `steps`), or [] where there is none to take."""
  if retreat is None or steps[retreat] >= extensions:
    return []
  axis, side = retreat
  searched = sorted({point[axis] for point in grid})
  new = _beyond(searched, side, UPPER.get(axis, math.inf)) if len(searched) > 1 else None
  if new is None:
    return []
  steps[retreat] += 1
  return [dict(zip(axes, point)) for point in itertools.product(
      *([new] if name == axis else values for name, values in axes.items()))]


def search(score: Callable[[dict], dict], axes: Mapping[str, Sequence[float]],
           extensions: int = EXTENSIONS,
           retreat: tuple[str, int] | None = None) -> list[dict]:
  """Evaluates the grid `axes` ({axis: values}) and extends it past the edges its best point
  lies on (docs/testtime.md, "Past the edges of a grid").

  Args:
    score: score(point) -> a dict with "perplexity" (inf for a pass that diverged).
    axes: each axis's values, in the order searched (taken as floats).
    extensions: at most this many steps past each edge.
    retreat: (axis, side: +1 top, -1 bottom): where every point diverged, the edge to step
      past at every value of the other axes; None ends such a search with its grid.

  Returns:
    Every point evaluated, in order: [{**point, **score(point)}].
  """
  axes = {axis: [float(value) for value in values] for axis, values in axes.items()}
  points = [dict(zip(axes, values)) for values in itertools.product(*axes.values())]
  grid = [{**point, **score(point)} for point in points]
  steps = {(axis, side): 0 for axis in axes for side in (-1, 1)}
  while True:
    best = min(grid, key=lambda point: point["perplexity"])
    if not math.isfinite(best["perplexity"]):
      retreat_points = _retreat(grid, axes, retreat, steps, extensions)
      if not retreat_points:
        return grid
      grid.extend({**point, **score(point)} for point in retreat_points)
      continue
    for axis, side in steps:
      values = sorted({point[axis] for point in grid})
      at_edge = len(values) > 1 and best[axis] == (values[-1] if side > 0 else values[0])
      new = _beyond(values, side, UPPER.get(axis, math.inf)) if at_edge else None
      if new is not None and steps[axis, side] < extensions:
        steps[axis, side] += 1
        point = {name: new if name == axis else best[name] for name in axes}
        grid.append({**point, **score(point)})
        break
    else:
      return grid
