"""The test-time grid search: the grid, then steps past an edge its best point lies on."""

import math

import pytest

from attnlm_jax.testtime import grid_search


def bowl(**minimum):
  """A score whose perplexity grows with the squared log-distance from `minimum`."""
  def score(point):
    distance = sum((math.log(point[axis]) - math.log(value)) ** 2
                   for axis, value in minimum.items())
    return {"perplexity": 10.0 + distance}
  return score


def values(grid, axis):
  return [point[axis] for point in grid]


def test_a_best_point_inside_the_grid_adds_nothing():
  grid = grid_search.search(bowl(learning_rate=0.3), {"learning_rate": [0.1, 0.3, 1.0]})
  assert values(grid, "learning_rate") == [0.1, 0.3, 1.0]


def test_the_top_edge_is_passed_geometrically_until_a_point_is_no_better():
  # 1 / 0.3 -> 3.3 (better than 1 for a minimum at 5), then 3.3 * 3.3 / 1 = 10.89 -> 11
  # (further from 5 than 3.3 in log): the walk stops with 3.3 inside the values searched.
  grid = grid_search.search(bowl(learning_rate=5.0), {"learning_rate": [0.1, 0.3, 1.0]})
  assert values(grid, "learning_rate") == [0.1, 0.3, 1.0, 3.3, 11.0]
  assert min(grid, key=lambda p: p["perplexity"])["learning_rate"] == 3.3


def test_the_bottom_edge_is_passed_at_most_extensions_times():
  # 1e-4 * 1e-4 / 3e-4 = 3.33e-5 -> 3.3e-5; 3.3e-5 ** 2 / 1e-4 = 1.089e-5 -> 1.1e-5;
  # 1.1e-5 ** 2 / 3.3e-5 = 3.67e-6 -> 3.7e-6; then the limit of three steps.
  grid = grid_search.search(bowl(learning_rate=1e-7), {"learning_rate": [1e-4, 3e-4, 1e-3]})
  assert values(grid, "learning_rate") == [1e-4, 3e-4, 1e-3, 3.3e-5, 1.1e-5, 3.7e-6]
  short = grid_search.search(bowl(learning_rate=1e-7), {"learning_rate": [1e-4, 3e-4, 1e-3]},
                             extensions=1)
  assert values(short, "learning_rate") == [1e-4, 3e-4, 1e-3, 3.3e-5]
  alone = grid_search.search(bowl(learning_rate=1e-7), {"learning_rate": [1e-4, 3e-4, 1e-3]},
                             extensions=0)
  assert values(alone, "learning_rate") == [1e-4, 3e-4, 1e-3]


def test_zero_is_a_bound_and_a_step_from_zero_is_arithmetic():
  def towards(target):
    return lambda point: {"perplexity": 10.0 + (point["decay"] - target) ** 2}
  below = grid_search.search(towards(-1.0), {"decay": [0.0, 0.01]})
  assert values(below, "decay") == [0.0, 0.01]                  # 0 is a bound, not an edge
  above = grid_search.search(towards(0.025), {"decay": [0.0, 0.01]})
  # 2 x 0.01 - 0, then 0.02 ** 2 / 0.01
  assert values(above, "decay") == [0.0, 0.01, 0.02, 0.04]


def test_an_axis_stops_at_its_upper_bound():
  # lambda: 0.4 * 0.4 / 0.2 = 0.8, then 1.6 held at 0.9 (UPPER), then nothing past 0.9.
  def score(point):
    return {"perplexity": 10.0 - point["lambda"]}
  grid = grid_search.search(score, {"lambda": [0.0, 0.2, 0.4]})
  assert grid_search.UPPER["lambda"] == 0.9
  assert values(grid, "lambda") == [0.0, 0.2, 0.4, 0.8, 0.9]


def test_two_axes_step_from_the_best_point_with_the_other_axis_held():
  grid = grid_search.search(bowl(learning_rate=5.0, decay=0.03),
                            {"learning_rate": [0.3, 1.0], "decay": [0.01, 0.03, 0.1]})
  assert len(grid) == 6 + 2
  assert [(p["learning_rate"], p["decay"]) for p in grid[6:]] == [(3.3, 0.03), (11.0, 0.03)]


def test_a_grid_that_diverged_everywhere_is_not_extended_without_a_retreat():
  grid = grid_search.search(lambda point: {"perplexity": math.inf},
                            {"learning_rate": [0.1, 1.0]})
  assert values(grid, "learning_rate") == [0.1, 1.0]


def diverging_above(rate, minimum):
  """A score that diverges at a learning rate above `rate` and is a bowl below it."""
  def score(point):
    if point["learning_rate"] > rate:
      return {"perplexity": math.inf}
    return bowl(learning_rate=minimum, decay=0.03)(point)
  return score


def test_a_grid_that_diverged_everywhere_retreats_at_every_decay_until_a_point_holds():
  # 0.1 * 0.1 / 0.3 -> 0.033 at each decay (all diverge), then 0.033 ** 2 / 0.1 -> 0.011,
  # which holds; the walk then goes on from the best, (0.011, 0.03), as past any edge: one
  # step more down (0.0037, nearer the minimum at 0.002), the third and last past that edge.
  axes = {"learning_rate": [0.1, 0.3, 1.0], "decay": [0.01, 0.03, 0.1]}
  grid = grid_search.search(diverging_above(0.02, 0.002), axes, retreat=("learning_rate", -1))
  assert [(p["learning_rate"], p["decay"]) for p in grid[9:]] == [
      (0.033, 0.01), (0.033, 0.03), (0.033, 0.1), (0.011, 0.01), (0.011, 0.03), (0.011, 0.1),
      (0.0037, 0.03)]
  best = min(grid, key=lambda p: p["perplexity"])
  assert (best["learning_rate"], best["decay"]) == (0.0037, 0.03)


def test_a_retreat_takes_at_most_extensions_steps():
  axes = {"learning_rate": [0.1, 0.3, 1.0], "decay": [0.01, 0.1]}
  grid = grid_search.search(diverging_above(1e-9, 1e-10), axes, extensions=2,
                            retreat=("learning_rate", -1))
  assert sorted(set(values(grid, "learning_rate"))) == [0.011, 0.033, 0.1, 0.3, 1.0]
  assert len(grid) == 6 + 2 * 2 and not any(math.isfinite(p["perplexity"]) for p in grid)


def test_a_diverging_step_ends_the_walk_on_its_side():
  def score(point):
    return {"perplexity": math.inf if point["learning_rate"] > 2 else 10 - point["learning_rate"]}
  grid = grid_search.search(score, {"learning_rate": [0.3, 1.0]})
  assert values(grid, "learning_rate") == [0.3, 1.0, 3.3]
  assert min(grid, key=lambda p: p["perplexity"])["learning_rate"] == pytest.approx(1.0)
