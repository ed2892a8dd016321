"""The papers' learning-rate schedules and early stopping."""

import pytest

from attnlm_jax.training import schedules


def test_ptb_halves_every_epoch_after_12():
  lrs = [schedules.learning_rate(e, 1.0, 12, 2.0) for e in range(1, 16)]
  assert lrs[:12] == [1.0] * 12
  assert lrs[12:] == [0.5, 0.25, 0.125]


def test_wikitext2_divides_by_1_15_after_14():
  assert schedules.learning_rate(14, 1.0, 14, 1.15) == 1.0
  assert schedules.learning_rate(15, 1.0, 14, 1.15) == pytest.approx(1 / 1.15)
  assert schedules.learning_rate(17, 1.0, 14, 1.15) == pytest.approx(1 / 1.15**3)


def test_early_stopping_counts_epochs_without_improvement():
  state = schedules.EarlyStopping(patience=2)
  history = []
  for epoch, ppl in enumerate([10.0, 9.0, 9.0, 9.5], start=1):
    state = state.update(epoch, ppl)
    history.append((state.improved, state.should_stop))
  assert history == [(True, False), (True, False), (False, False), (False, True)]
  assert (state.best_epoch, state.best_perplexity) == (2, 9.0)


def test_early_stopping_resets_patience_on_improvement():
  state = schedules.EarlyStopping(patience=2)
  for epoch, ppl in enumerate([10.0, 11.0, 8.0, 9.0], start=1):
    state = state.update(epoch, ppl)
  assert (state.best_epoch, state.bad_epochs, state.should_stop) == (3, 1, False)


def test_early_stopping_round_trips_through_a_dict():
  state = schedules.EarlyStopping(patience=3).update(1, 5.0).update(2, 6.0)
  assert schedules.EarlyStopping.from_dict(state.to_dict()) == state
