"""The published tables as data: each row a config file of `configs/` with its argument and
overrides and the printed row it is set beside (`printed.PAPER_RESULTS`), the POS tagger a
`tags=1` row reads, or an interpolation of trained rows (docs/reproduce.md)."""

import dataclasses
import pathlib
import re
from typing import Any, Mapping, Optional, Sequence, Union

from etils import epath

from attnlm_jax.common import checkout
from attnlm_jax.common import errors
from attnlm_jax.experiments import printed

# Row kinds.
TRAIN = "train"              # train.train_and_evaluate
TAGGER = "tagger"            # tagger.train_tagger
INTERPOLATE = "interpolate"  # ensemble.interpolate of trained rows on valid and test


class TableError(errors.UserError):
  """An unknown table or row, or no configs/ directory to read rows from."""


@dataclasses.dataclass(frozen=True)
class Row:
  """One row of a table.

  Attributes:
    name: the row's name, also its directory in the table's workdir.
    config: a file of configs/ and its argument, "ptb.py:score=single" (train, tagger rows).
    overrides: dotted config field -> value, as `--config.FIELD=VALUE` sets it.
    paper: (corpus, model) of its printed row in `printed.PAPER_RESULTS`, or None.
    kind: TRAIN, TAGGER or INTERPOLATE.
    row_dirs: dotted config field -> the row whose directory it names (the tagger of a
      `tags=1` row); those rows are trained first.
    members: INTERPOLATE: the rows mixed, trained first.
    weights: INTERPOLATE: the weight of each member.
    note: what its page says about how it was run ("": nothing), e.g. the stopping rule.
  """
  name: str
  config: str = ""
  overrides: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  paper: Optional[tuple[str, str]] = None
  kind: str = TRAIN
  row_dirs: Mapping[str, str] = dataclasses.field(default_factory=dict)
  members: tuple[str, ...] = ()
  weights: tuple[float, ...] = ()
  note: str = ""

  def directory(self, workdir) -> epath.Path:
    """The row's directory in a table's workdir."""
    return epath.Path(str(workdir)) / self.name

  @property
  def needs(self) -> tuple[str, ...]:
    """The rows this one needs finished first."""
    return (*self.row_dirs.values(), *self.members)


@dataclasses.dataclass(frozen=True)
class Table:
  """A published table: its title and rows (a row's dependencies come before it), and
  `reference`, a row that the others are compared with epoch by epoch on the page ("": none),
  and `tolerance`, when the page should say whether each row stays within that many percent
  of it at every epoch (None: the comparison alone), and `comparisons`, pairs (row, against)
  that the page judges over every seed of each (`seeds.py`)."""
  title: str
  rows: tuple[Row, ...]
  reference: str = ""
  tolerance: Optional[float] = None
  comparisons: tuple[tuple[str, str], ...] = ()


# A 1 x 16 model, 50 batches of rows cut to 10 tokens and 2 epochs: seconds per row.
DEMO_OVERRIDES = {"model.hidden_size": 16, "data.batch_size": 400, "data.max_len": 10,
                  "data.bucket": False, "data.eval_batch_size": 2000, "train.num_epochs": 2,
                  "train.patience": 2, "train.save_every_steps": 20,
                  "train.log_every_steps": 10}

# The bfloat16 check: the papers' recipe for its first 3 epochs (the learning rate is
# constant until epoch 12), in each compute dtype.
PRECISION_OVERRIDES = {"train.num_epochs": 3, "model.compute_dtype": "float32"}


def seed_row(row: Row, seed: int) -> Row:
  """`row` with another seed of its parameters, dropout and batch order: ROW_seedN."""
  return dataclasses.replace(row, name=f"{row.name}_seed{seed}",
                             overrides={**row.overrides, "seed": seed, "data.seed": seed})


SEED_SUFFIX = re.compile(r"_seed\d+$")


def base_row(name: str) -> str:
  """The row a seed row repeats ("single_seed1" -> "single"); a row's own name otherwise."""
  return SEED_SUFFIX.sub("", name)


# The stopping rule of the paper-scale rows: the recipe halves the learning rate every
# epoch from epoch 13, so by the end of epoch 22 it is 1/1024 of its first value; a row
# that trained to the recipe's end reported what it would have reported had it stopped
# there (the evidence: docs/reproduce.md).
STOPPING_RULE = {"train.num_epochs": 22}
STOPPING_RULE_NOTE = (f"ends after epoch {STOPPING_RULE['train.num_epochs']} at the latest, once "
                      "its learning rate has been halved ten times (the stopping rule, "
                      "docs/reproduce.md), or sooner when the recipe's patience runs out")


# The released code's network (configs/released.py) halves its learning rate from epoch 14:
# the same stopping rule, one epoch later.
RELEASED_STOPPING_RULE = {"train.num_epochs": 23}
RELEASED_NOTE = (f"ends after epoch {RELEASED_STOPPING_RULE['train.num_epochs']} at the latest, "
                 "once its learning rate, halved from epoch 14, has been halved ten times, or "
                 "sooner when the recipe's patience runs out")
# The rows of the released code's network: `released` attends as its training graph does
# (over the zero slot alone), `released_attention` over the memory the paper describes.
RELEASED_ROWS = (
    Row("released", "released.py:score=single,memory=zero_slot", RELEASED_STOPPING_RULE,
        paper=("ptb", "Attentive LM, single score"), note=RELEASED_NOTE),
    Row("released_attention", "released.py:score=single,memory=filled", RELEASED_STOPPING_RULE,
        paper=("ptb", "Attentive LM, single score"), note=RELEASED_NOTE),
)
# Their second seeds: whether real attention beats the inert network needs two of each.
RELEASED_SEED_ROWS = tuple(seed_row(row, 1) for row in RELEASED_ROWS)


# `none` in bfloat16 to the stopping rule (bf16 matmul inputs, float32 sums and state): judged
# as a recipe, against the float32 seeds' spread (docs/results/precision/README.md).
BFLOAT16_ROWS = (Row("none_bfloat16", "ptb.py:score=none",
                     {**STOPPING_RULE, "model.compute_dtype": "bfloat16"},
                     note=STOPPING_RULE_NOTE),)


# `average` with its paper's batches (Salton & Kelleher 2018, sec. 6.3): 32 sentences "taken
# from the dataset in sequence", each padded to 35 tokens; the recipe shuffles and buckets.
AVERAGE_ORDER_ROWS = (Row("average_in_sequence", "ptb.py:score=average",
                          {**STOPPING_RULE, "data.shuffle": False, "data.bucket": False},
                          paper=("ptb", "Averaging RNN-LM"), note=STOPPING_RULE_NOTE),)


# The Salton papers' scores, and `proj`, their control: one row each in their tables.
SALTON_SCORES = ("none", "proj", "single", "combined", "average", "conv1x1")


def _salton_table(title: str, config_file: str, corpus: str,
                  stopping_rule: Sequence[str] = (), seeds: Sequence[str] = (),
                  extra: Sequence[Row] = (),
                  comparisons: tuple[tuple[str, str], ...] = ()) -> Table:
  """The six paper-scale rows of the Salton papers' tables on `corpus`: the baseline, the
  `proj` control, the Attentive LM's two scores, the averaging LM and 1x1-conv attention;
  the rows named in `stopping_rule` end after epoch 22 (`STOPPING_RULE`); each score named in
  `seeds` has a second row, SCORE_seed1, with seed 1 for its parameters, dropout and batch
  order; `extra` rows follow; the page compares every row with `none` epoch by epoch, and
  judges the pairs of `comparisons` over every seed of each."""
  printed_rows = printed.row_names(corpus, (printed.SALTON_2017, printed.SALTON_2018,
                                             printed.CONV1X1))
  ruled = lambda score: score in stopping_rule
  rows = {score: Row(score, f"{config_file}:score={score}",
                     overrides=dict(STOPPING_RULE) if ruled(score) else {},
                     paper=(corpus, printed_rows[score]) if score in printed_rows else None,
                     note=STOPPING_RULE_NOTE if ruled(score) else "")
          for score in SALTON_SCORES}
  return Table(title, tuple(rows.values()) + tuple(seed_row(rows[score], 1) for score in seeds)
               + tuple(extra), reference="none", comparisons=comparisons)


# The readings of Cao & Yu's recipe that its text leaves open (docs/results/das/README.md):
# the stream protocol (windows of one token stream, the state carried across them) against
# one sentence per row, a softmax matrix of its own (the paper's eq. 15) against the tied
# embedding, and the schedule; the `lstm` row under each, set beside the printed LSTM, chose
# configs/das.py. Each row names every reading, so that its run matches it whatever das.py says.
SENTENCE_OVERRIDES = {"data.span": "sentence", "data.bucket": True}
STREAM_OVERRIDES = {"data.span": "stream", "data.bucket": False}
TIED_OVERRIDES = {"model.tie_embeddings": True}
UNTIED_OVERRIDES = {"model.tie_embeddings": False}
# The papers' rule (configs/default.py): the lr halved every epoch after epoch 12. At batch
# 128 an epoch is 208 updates, and `stream_untied` still gained 3% an epoch when it began.
EPOCHS_OVERRIDES = {"train.lr_schedule": "epochs", "train.lr_plateau_improvement": 0.0}
# The lr halved only after an epoch that gains less than 1%.
PLATEAU_OVERRIDES = {"train.lr_schedule": "plateau", "train.lr_plateau_improvement": 0.01,
                     "train.lr_plateau_patience": 1}
# ... only after two such epochs in a row: one epoch's gain at lr 1.0 swings between 0.5% and
# 2.2%, and where the first halving fell set `lstm`'s two seeds 1.5 apart.
PLATEAU_PATIENCE2_OVERRIDES = {**PLATEAU_OVERRIDES, "train.lr_plateau_patience": 2}
# Training ends before an epoch below lr 0.001, where `stream_untied` and `stream_tied`
# gained 0.01 in their last 19 epochs (55 minutes each on 2 CPU cores).
NO_FLOOR_OVERRIDES = {"train.min_learning_rate": 0.0}
FLOOR_OVERRIDES = {"train.min_learning_rate": 0.001}
DAS_LSTM = ("ptb", "LSTM 1x300")


# Cao & Yu's language models, the `das` table's rows; a `tags=1` row reads the `tagger` row.
DAS_ROWS = (
    Row("lstm", "das.py:model=lstm", paper=DAS_LSTM),
    Row("lstmn", "das.py:model=lstmn", paper=("ptb", "LSTMN")),
    Row("das", "das.py:model=das", paper=("ptb", "DAS LM")),
    Row("das_lstmn", "das.py:model=das_lstmn", paper=("ptb", "DAS-LSTMN")),
    Row("das_lstmn_tags", "das.py:model=das_lstmn,tags=1",
        paper=("ptb", "DAS-LSTMN + tagging model"), row_dirs={"data.tagger_dir": "tagger"}),
)


def _das_recipe_row(name: str, *readings: Mapping[str, Any]) -> Row:
  """The `das` table's `lstm` row under the given readings of the paper."""
  overrides = {key: value for reading in readings for key, value in reading.items()}
  return Row(name, "das.py:model=lstm", overrides, paper=DAS_LSTM)


# The LSTMN's tapes, whose length neither paper gives. Held as the window (h_0 and the last
# max_len - 1 = 34 states of the stream, tape_slots 0), the score, blind to position, reads
# them near uniformly and `lstmn` ended at test 129.9 against `lstm`'s 92.9; with 2 slots
# (h_0 and the last state) at 93.3, so configs/das.py took 2 (after 3 epochs, valid 257.2 with
# the window, 231.6 with 8 slots, 203.5 with 2, `lstm` 202.7: docs/results/das/probes/lstmn_tape).
def _das_tape_row(name: str, tape_slots: int) -> Row:
  """The `das` table's `lstmn` row with tapes of `tape_slots` slots (h_0 included; 0: the
  window)."""
  return Row(name, "das.py:model=lstmn", {"model.tape_slots": tape_slots},
             paper=("ptb", "LSTMN"))


# The recipe `configs/das.py` took, and the same with the steadier rule (patience 2).
STREAM_UNTIED_PLATEAU = _das_recipe_row("stream_untied_plateau", STREAM_OVERRIDES,
                                        UNTIED_OVERRIDES, PLATEAU_OVERRIDES, FLOOR_OVERRIDES)
STREAM_UNTIED_PATIENCE2 = _das_recipe_row("stream_untied_patience2", STREAM_OVERRIDES,
                                          UNTIED_OVERRIDES, PLATEAU_PATIENCE2_OVERRIDES,
                                          FLOOR_OVERRIDES)


# The 1 x 200 rows of every score (configs/ptb_small.py).
PTB_CPU_ROWS = {score: Row(score, f"ptb_small.py:score={score}")
                for score in SALTON_SCORES}
# `proj` and `single` with their output layer h'_t at a tenth of the others' learning rate: the
# fast start that removes the slow first epochs of the rows with that layer
# (docs/results/ptb_cpu/README.md).
HEAD_LR_OVERRIDES = {"train.head_lr_factor": 0.1}
HEAD_LR_ROWS = tuple(Row(f"{score}_head_lr0.1", f"ptb_small.py:score={score}", HEAD_LR_OVERRIDES)
                     for score in ("proj", "single"))


TABLES = {
    "zaremba": Table("Zaremba et al. (2015): regularized LSTMs on Penn Treebank", (
        Row("small", "zaremba.py:size=small", paper=("ptb", "Non-regularized LSTM")),
        Row("medium", "zaremba.py:size=medium", paper=("ptb", "Medium regularized LSTM")),
        # TensorFlow's PTB tutorial's medium recipe: lr divided by 1.25 an epoch, not 1.2.
        Row("medium_tutorial_decay", "zaremba.py:size=medium",
            {"train.lr_decay_divisor": 1.25}, paper=("ptb", "Medium regularized LSTM")),
        Row("large", "zaremba.py:size=large", paper=("ptb", "Large regularized LSTM")),
    )),
    "salton_ptb": _salton_table("Attentive LSTM LMs on Penn Treebank, 2 x 650 (Salton et al.)",
                                "ptb.py", "ptb",
                                stopping_rule=("none", "proj", "combined", "average", "conv1x1"),
                                seeds=("none", "proj", "single"),
                                extra=(BFLOAT16_ROWS + RELEASED_ROWS + RELEASED_SEED_ROWS
                                       + AVERAGE_ORDER_ROWS),
                                comparisons=(("single", "none"), ("proj", "none"),
                                             ("single", "proj"),
                                             ("released_attention", "released"))),
    "salton_wt2": _salton_table("Attentive LSTM LMs on WikiText-2, 2 x 1000 (Salton et al.)",
                                "wikitext2.py", "wikitext2"),
    "das": Table("DAS LM, LSTMN and POS tags on Penn Treebank, 1 x 300 (Cao & Yu)", (
        Row("tagger", "tagger.py", kind=TAGGER),
        *DAS_ROWS,
        Row("interpolated", kind=INTERPOLATE, members=("das_lstmn_tags", "lstm"),
            weights=(0.5, 0.5), paper=("ptb", "DAS-LSTMN + tags, interpolated with LSTM")),
        # Second seeds: the spread each verdict needs (where the schedule first halved set
        # `lstm`'s two seeds 1.5 apart, as far as the printed LSTMN and DAS are below its LSTM).
        *(seed_row(row, 1) for row in DAS_ROWS),
    ), comparisons=(("lstmn", "lstm"), ("das", "lstm"), ("das_lstmn", "lstm"),
                    ("das_lstmn_tags", "das_lstmn"))),
    "das_recipe": Table("The `das` table's recipe: its LSTM and LSTMN rows under each reading "
                        "of the paper", (
        _das_recipe_row("sentence_tied", SENTENCE_OVERRIDES, TIED_OVERRIDES, EPOCHS_OVERRIDES,
                        FLOOR_OVERRIDES),
        _das_recipe_row("sentence_untied", SENTENCE_OVERRIDES, UNTIED_OVERRIDES,
                        EPOCHS_OVERRIDES, FLOOR_OVERRIDES),
        _das_recipe_row("stream_tied", STREAM_OVERRIDES, TIED_OVERRIDES, EPOCHS_OVERRIDES,
                        NO_FLOOR_OVERRIDES),
        _das_recipe_row("stream_untied", STREAM_OVERRIDES, UNTIED_OVERRIDES, EPOCHS_OVERRIDES,
                        NO_FLOOR_OVERRIDES),
        STREAM_UNTIED_PLATEAU,
        _das_recipe_row("stream_tied_plateau", STREAM_OVERRIDES, TIED_OVERRIDES,
                        PLATEAU_OVERRIDES, FLOOR_OVERRIDES),
        seed_row(STREAM_UNTIED_PLATEAU, 1),
        STREAM_UNTIED_PATIENCE2,
        seed_row(STREAM_UNTIED_PATIENCE2, 1),
        _das_tape_row("lstmn_tape35", 0),
        _das_tape_row("lstmn_tape2", 2),
        _das_tape_row("lstmn_tape8", 8),
    ), reference="sentence_tied",
        comparisons=(("stream_untied_patience2", "stream_untied_plateau"),)),
    "ptb_cpu": Table("Attention scores on Penn Treebank, 1 x 200, on a CPU", (
        *PTB_CPU_ROWS.values(),
        seed_row(PTB_CPU_ROWS["none"], 1),
        *HEAD_LR_ROWS,
        *(seed_row(row, 1) for row in HEAD_LR_ROWS),
    ), reference="none",
        comparisons=(("proj_head_lr0.1", "none"), ("single_head_lr0.1", "none"),
                     ("single_head_lr0.1", "proj_head_lr0.1"))),
    "precision": Table("bfloat16 against float32: 3 epochs of the 2 x 650 PTB `single` row", (
        Row("float32", "ptb.py:score=single", PRECISION_OVERRIDES),
        Row("bfloat16", "ptb.py:score=single",
            {**PRECISION_OVERRIDES, "model.compute_dtype": "bfloat16"}),
        # The same float32 arithmetic summed in another order (two batch shards): how far
        # rounding alone moves the curve.
        Row("float32_2shards", "ptb.py:score=single",
            {**PRECISION_OVERRIDES, "train.grad_shards": 2}),
    ), reference="float32", tolerance=1.0),
    "demo": Table("Demo: a 1 x 16 LSTM with and without attention, embedded corpus", (
        Row("none", "demo.py:score=none", DEMO_OVERRIDES),
        Row("single", "demo.py:score=single", DEMO_OVERRIDES),
    )),
}


def configs_dir() -> pathlib.Path:
  """The repository's configs/ (beside the attnlm_jax package of a clone)."""
  path = checkout.REPOSITORY / "configs"
  if not path.is_dir():
    raise TableError(f"{path} not found: the table runner reads the repository's "
                     "configs/; run it from a clone (pip install -e .)")
  return path


def get_table(name: str) -> Table:
  """The table called `name`."""
  if name not in TABLES:
    raise TableError(f"unknown table {name!r}: choose --table from {', '.join(TABLES)}")
  return TABLES[name]


def row_names(rows: Union[str, Sequence[str]]) -> list[str]:
  """A `rows` argument as a list: a sequence of names, or one comma-separated string ("" is
  none)."""
  return (rows.split(",") if rows else []) if isinstance(rows, str) else list(rows)


def select_rows(name: str, rows: Sequence[str] = ()) -> list[Row]:
  """The rows of table `name` called `rows` (all when empty) and the rows they need, in the
  table's order."""
  by_name = {row.name: row for row in get_table(name).rows}
  unknown = [row for row in rows if row not in by_name]
  if unknown:
    raise TableError(f"unknown row {', '.join(unknown)} of table {name}: choose --rows "
                     f"from {', '.join(by_name)}")
  wanted = set(rows or by_name)
  pending = list(wanted)
  while pending:
    for need in by_name[pending.pop()].needs:
      if need not in wanted:
        wanted.add(need)
        pending.append(need)
  return [row for row in by_name.values() if row.name in wanted]
