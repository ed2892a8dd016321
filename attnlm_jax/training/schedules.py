"""Learning-rate schedules and early stopping on validation perplexity.

Salton et al. (PTB, after Zaremba et al. 2015): lr 1.0, halved every epoch after epoch 12.
WikiText-2: lr 1.0, divided by 1.15 every epoch after epoch 14. Both are one rule,
`lr(epoch) = lr0 / divisor ** max(0, epoch - decay_after)` with 1-based epochs
(`config.train.lr_schedule = "epochs"`). The other rule, `"plateau"`, divides the learning
rate whenever an epoch leaves validation perplexity on a plateau, as pytorch/examples'
word_language_model does (`PlateauDecay`).

Training stops when validation perplexity has not improved for `patience` epochs, or before
an epoch whose learning rate is below `config.train.min_learning_rate`; the parameters roll
back to those of the best epoch.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import ml_collections

# config.train.lr_schedule: the fixed rule of the papers, or decay on a validation plateau.
SCHEDULES = ("epochs", "plateau")


def learning_rate(epoch: int, base: float, decay_after: int, divisor: float) -> float:
  """lr of a 1-based `epoch`: base / divisor ** max(0, epoch - decay_after).

  Args:
    epoch: the epoch about to be trained, from 1.
    base: the initial learning rate.
    decay_after: the last epoch trained at `base`.
    divisor: the factor the learning rate is divided by in every later epoch (2.0 halves).
  """
  return base / divisor ** max(0, epoch - decay_after)


@dataclasses.dataclass(frozen=True)
class PlateauDecay:
  """The learning rate divided on a plateau of validation perplexity.

  lr = lr0 / divisor ** decays. An epoch is on a plateau when its validation perplexity p_e
  is not below (1 - min_improvement) * min(p_1 .. p_{e-1}); `decays` counts the runs of
  `patience` plateau epochs in a row (the run starts again after each decay and after an
  epoch off the plateau), as torch.optim.lr_scheduler.ReduceLROnPlateau's `patience` (which
  waits patience + 1 epochs). With patience 1 and min_improvement 0 this is
  pytorch/examples' word_language_model (which divides by 4 after any epoch that does not
  improve); a positive threshold also counts an epoch that improves, but by too little.

  Attributes:
    min_improvement: the relative improvement an epoch needs to keep the learning rate.
    patience: plateau epochs in a row that divide the learning rate.
    best_perplexity: the lowest validation perplexity so far (None before the first epoch).
    decays: the divisions so far.
    plateau_epochs: plateau epochs in a row since the last division.
  """
  min_improvement: float
  patience: int = 1
  best_perplexity: Optional[float] = None
  decays: int = 0
  plateau_epochs: int = 0

  def update(self, perplexity: float) -> PlateauDecay:
    """The state after an epoch with this validation perplexity."""
    if self.best_perplexity is None:
      return dataclasses.replace(self, best_perplexity=perplexity)
    on_plateau = perplexity >= self.best_perplexity * (1.0 - self.min_improvement)
    streak = self.plateau_epochs + 1 if on_plateau else 0
    decay = streak >= self.patience
    return dataclasses.replace(self, best_perplexity=min(perplexity, self.best_perplexity),
                               decays=self.decays + int(decay),
                               plateau_epochs=0 if decay else streak)

  def to_dict(self) -> dict:
    """A JSON-serialisable form (saved in every checkpoint)."""
    return dataclasses.asdict(self)

  @classmethod
  def from_dict(cls, state: dict) -> PlateauDecay:
    """Inverse of `to_dict`."""
    return cls(**state)


def epoch_learning_rate(train_config: ml_collections.ConfigDict, epoch: int,
                        plateau: PlateauDecay) -> float:
  """The learning rate of a 1-based `epoch` under `train_config.lr_schedule`: "epochs"
  (`learning_rate`) or "plateau" (lr0 / divisor ** plateau.decays, `PlateauDecay`)."""
  if train_config.lr_schedule == "plateau":
    return train_config.learning_rate / train_config.lr_decay_divisor ** plateau.decays
  return learning_rate(epoch, train_config.learning_rate, train_config.lr_decay_after,
                       train_config.lr_decay_divisor)


@dataclasses.dataclass(frozen=True)
class EarlyStopping:
  """Patience on validation perplexity.

  Attributes:
    patience: epochs without improvement after which training stops.
    best_perplexity: the lowest validation perplexity so far (None before the first epoch).
    best_epoch: the epoch that reached it (0 before the first epoch).
    bad_epochs: epochs since the last improvement.
  """
  patience: int
  best_perplexity: Optional[float] = None
  best_epoch: int = 0
  bad_epochs: int = 0

  def update(self, epoch: int, perplexity: float) -> EarlyStopping:
    """The state after an epoch with this validation perplexity (strictly lower improves)."""
    if self.best_perplexity is None or perplexity < self.best_perplexity:
      return dataclasses.replace(self, best_perplexity=perplexity, best_epoch=epoch,
                                 bad_epochs=0)
    return dataclasses.replace(self, bad_epochs=self.bad_epochs + 1)

  @property
  def should_stop(self) -> bool:
    """True once `patience` epochs in a row have not improved."""
    return self.bad_epochs >= self.patience

  def to_dict(self) -> dict:
    """A JSON-serialisable form (saved in every checkpoint)."""
    return dataclasses.asdict(self)

  @classmethod
  def from_dict(cls, state: dict) -> EarlyStopping:
    """Inverse of `to_dict`."""
    return cls(**state)
