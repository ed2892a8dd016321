"""The learning-rate schedules and early stopping."""

import ml_collections
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
    history.append((state.best_epoch, state.bad_epochs, state.should_stop))
  assert history == [(1, 0, False), (2, 0, False), (2, 1, False), (2, 2, True)]
  assert (state.best_epoch, state.best_perplexity) == (2, 9.0)


def test_early_stopping_resets_patience_on_improvement():
  state = schedules.EarlyStopping(patience=2)
  for epoch, ppl in enumerate([10.0, 11.0, 8.0, 9.0], start=1):
    state = state.update(epoch, ppl)
  assert (state.best_epoch, state.bad_epochs, state.should_stop) == (3, 1, False)


def test_early_stopping_round_trips_through_a_dict():
  state = schedules.EarlyStopping(patience=3).update(1, 5.0).update(2, 6.0)
  assert schedules.EarlyStopping.from_dict(state.to_dict()) == state


def test_plateau_decays_after_each_epoch_that_improves_by_less_than_the_threshold():
  state = schedules.PlateauDecay(min_improvement=0.01)
  decays = []
  # 100 -> 98: 2% better; 97.5: 0.5% better (< 1%); 97.6: worse; 90: 7.7% better; 90: equal.
  for ppl in [100.0, 98.0, 97.5, 97.6, 90.0, 90.0]:
    state = state.update(ppl)
    decays.append(state.decays)
  assert decays == [0, 0, 1, 2, 2, 3]
  assert state.best_perplexity == 90.0


def test_plateau_without_threshold_decays_only_when_an_epoch_does_not_improve():
  state = schedules.PlateauDecay(min_improvement=0.0)
  for ppl in [100.0, 99.99, 99.99, 120.0, 50.0]:
    state = state.update(ppl)
  assert state.decays == 2


def test_plateau_with_patience_decays_after_that_many_plateau_epochs_in_a_row():
  """Patience 2, threshold 1%: a lone plateau epoch keeps the rate, an epoch off the plateau
  starts the count again, and a division starts it again too."""
  state = schedules.PlateauDecay(min_improvement=0.01, patience=2)
  decays = []
  # 100; 99.5 (0.5%: plateau 1); 95 (off: 0); 94.8 (plateau 1); 94.9 (plateau 2: decay);
  # 94.7 (plateau 1); 94.6 (plateau 2: decay).
  for ppl in [100.0, 99.5, 95.0, 94.8, 94.9, 94.7, 94.6]:
    state = state.update(ppl)
    decays.append(state.decays)
  assert decays == [0, 0, 0, 0, 1, 1, 2]
  assert state.plateau_epochs == 0


def test_a_plateau_state_saved_before_patience_existed_reads_as_patience_one():
  saved = {"min_improvement": 0.01, "best_perplexity": 100.0, "decays": 3}
  state = schedules.PlateauDecay.from_dict(saved)
  assert (state.patience, state.plateau_epochs) == (1, 0)
  assert state.update(99.9).decays == 4


def test_each_schedule_gives_its_own_learning_rate():
  config = ml_collections.ConfigDict({"learning_rate": 1.0, "lr_decay_after": 2,
                                      "lr_decay_divisor": 4.0, "lr_schedule": "epochs"})
  plateau = schedules.PlateauDecay(0.0).update(10.0).update(11.0).update(12.0)  # 2 decays
  assert schedules.epoch_learning_rate(config, 5, plateau) == 1 / 4**3
  config.lr_schedule = "plateau"
  assert schedules.epoch_learning_rate(config, 5, plateau) == 1 / 4**2
  assert schedules.epoch_learning_rate(config, 5, schedules.PlateauDecay(0.0)) == 1.0


def test_plateau_round_trips_through_a_dict():
  state = schedules.PlateauDecay(0.01, patience=2).update(5.0).update(6.0)
  assert state.plateau_epochs == 1
  assert schedules.PlateauDecay.from_dict(state.to_dict()) == state
