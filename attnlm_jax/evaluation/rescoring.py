"""Rescoring n-best lists (speech recognition, translation) with a trained language model.

    score(h) = first_pass(h) + lm_weight * log p_LM(h) + word_penalty * |h|

log p_LM(h): the natural-log probability of h's words and the closing `<eos>` (`evaluate.score`);
|h|: its number of words. Scores are log domain, higher is better. Input formats (tab-separated,
Moses, Kaldi), references and word error rates: docs/testtime.md, "n-best rescoring".
"""

import dataclasses
import math
from typing import Iterable, Optional, Sequence

from etils import epath
import numpy as np

from attnlm_jax.common import json_io
from attnlm_jax.common import text_files
from attnlm_jax.common.errors import UserError
from attnlm_jax.evaluation import evaluate

TAB, MOSES, KALDI = "tab", "moses", "kaldi"
MOSES_SEPARATOR = "|||"
KALDI_TEXT, KALDI_COSTS = "text", ("ac_cost", "lm_cost")
AUTO = "auto"
# The LM weights tried by lm_weight="auto".
LM_WEIGHTS = tuple(round(0.1 * i, 1) for i in range(21))
# The weight of a Kaldi hypothesis's acoustic cost in its first-pass score (Kaldi's usual
# decoding acoustic scale).
ACOUSTIC_SCALE = 0.1


class RescoringError(UserError):
  """An n-best or reference file that cannot be read, or bad rescoring settings."""


@dataclasses.dataclass(frozen=True)
class Hypothesis:
  """One line of an n-best file."""
  utterance: str
  text: str
  first_pass: float
  line: int                       # 1-based line number in the file
  fields: tuple[str, ...] = ()    # Moses: feature scores and further fields; Kaldi: costs

  @property
  def words(self) -> list[str]:
    return self.text.split()


def _fields(line: str, file_format: str) -> list[str]:
  if file_format == MOSES:
    return [field.strip() for field in line.split(MOSES_SEPARATOR)]
  return line.split("\t")


def _number(text: str, where: str, what: str) -> float:
  """A finite float, else RescoringError naming `where` and `what` the number is."""
  try:
    value = float(text)
  except ValueError:
    value = math.nan
  if not math.isfinite(value):
    raise RescoringError(f"{where}: {what} {text!r} is not a number")
  return value


def parse_nbest(lines: Sequence[str], name: str) -> tuple[list[Hypothesis], str]:
  """The hypotheses of an n-best file's lines and its format (TAB or MOSES).

  Blank lines are skipped. Raises RescoringError, naming `name` and the line, for a line
  with too few fields, a score that is not a finite number, an empty utterance id, or no
  hypothesis at all.
  """
  numbered = [(number, line.rstrip("\r\n")) for number, line in enumerate(lines, 1)
              if line.strip()]
  if not numbered:
    raise RescoringError(f"{name} is empty: give one hypothesis per line, "
                         "'utterance-id<TAB>score<TAB>text' or 'id ||| text ||| features ||| "
                         "score'")
  file_format = MOSES if MOSES_SEPARATOR in numbered[0][1] else TAB
  expected = ("4 fields 'id ||| text ||| features ||| score'" if file_format == MOSES
              else "3 tab-separated fields 'utterance-id<TAB>score<TAB>text'")
  hypotheses = []
  for number, line in numbered:
    where = f"{name}:{number}"
    fields = _fields(line, file_format)
    wrong_count = len(fields) < 4 if file_format == MOSES else len(fields) != 3
    if wrong_count:
      raise RescoringError(f"{where}: expected {expected}, got {len(fields)}")
    if file_format == MOSES:
      utterance, text, score, extra = fields[0], fields[1], fields[3], (fields[2], *fields[4:])
    else:
      (utterance, score, text), extra = fields, ()
    if not utterance.strip():
      raise RescoringError(f"{where}: the utterance id is empty")
    hypotheses.append(Hypothesis(utterance.strip(), " ".join(text.split()),
                                 _number(score, where, "first-pass score"), number,
                                 extra))
  return hypotheses, file_format


def _kaldi_utterance(hypothesis_id: str, where: str) -> str:
  """The utterance of a Kaldi hypothesis id `utterance-N` (N = 1, 2, ...)."""
  utterance, _, rank = hypothesis_id.rpartition("-")
  if not utterance or not rank.isdigit() or int(rank) < 1:
    raise RescoringError(f"{where}: hypothesis id {hypothesis_id!r} is not Kaldi's "
                         "'utterance-N' (N = 1, 2, ...)")
  return utterance


def _kaldi_costs(lines: Sequence[str], name: str, ids: Sequence[str]) -> dict[str, str]:
  """{hypothesis id: its cost's text} of a Kaldi cost file, one `utterance-N cost` line for
  each id of `ids` and no other."""
  costs, known = {}, set(ids)
  for number, line in enumerate(lines, 1):
    if not line.strip():
      continue
    where, fields = f"{name}:{number}", line.split()
    if len(fields) != 2:
      raise RescoringError(f"{where}: expected 'utterance-N cost', got {len(fields)} fields")
    if fields[0] not in known:
      raise RescoringError(f"{where}: {fields[0]!r} is not a hypothesis of the n-best text")
    _number(fields[1], where, "cost")
    costs[fields[0]] = fields[1]
  missing = [i for i in ids if i not in costs]
  if missing:
    raise RescoringError(f"{name} has no cost for {missing[0]!r}"
                         + (f" and {len(missing) - 1} more hypotheses" if len(missing) > 1
                            else ""))
  return costs


def kaldi_files(directory: epath.Path) -> dict[str, epath.Path]:
  """The files of a Kaldi n-best directory: {name: path} of `text`, `ac_cost`, `lm_cost`."""
  return {name: directory / name for name in (KALDI_TEXT, *KALDI_COSTS)}


def parse_kaldi(directory: epath.Path, acoustic_scale: float) -> list[Hypothesis]:
  """The hypotheses of a Kaldi n-best directory (`text`, `ac_cost`, `lm_cost`), each with the
  first-pass score -(acoustic_scale * ac_cost + lm_cost) and its two costs as `fields`.

  Raises RescoringError, naming the file and the line, for a missing file, an id that is not
  `utterance-N`, a repeated id, a cost that is not a finite number, or a hypothesis
  without both costs.
  """
  paths = kaldi_files(directory)
  for path in paths.values():
    if not path.is_file():
      raise RescoringError(f"{path} not found: a Kaldi n-best directory holds "
                           f"{', '.join(paths)} (nbest-to-linear's outputs, the words as text)")
  hypotheses = {}  # id -> (utterance, text, line number)
  for number, line in enumerate(text_files.read_lines(paths[KALDI_TEXT], RescoringError), 1):
    if not line.strip():
      continue
    where = f"{paths[KALDI_TEXT]}:{number}"
    hypothesis_id, *words = line.split()
    utterance = _kaldi_utterance(hypothesis_id, where)
    if hypothesis_id in hypotheses:
      raise RescoringError(f"{where}: hypothesis {hypothesis_id!r} repeats line "
                           f"{hypotheses[hypothesis_id][2]}")
    hypotheses[hypothesis_id] = (utterance, " ".join(words), number)
  if not hypotheses:
    raise RescoringError(f"{paths[KALDI_TEXT]} is empty: give one 'utterance-N words' line "
                         "per hypothesis")
  ac_cost, lm_cost = (
      _kaldi_costs(text_files.read_lines(paths[name], RescoringError), str(paths[name]),
                   list(hypotheses))
      for name in KALDI_COSTS)
  return [Hypothesis(utterance, text, -(acoustic_scale * float(ac_cost[i]) + float(lm_cost[i])),
                     number, (ac_cost[i], lm_cost[i]))
          for i, (utterance, text, number) in hypotheses.items()]


def parse_references(lines: Sequence[str], name: str,
                     utterances: Iterable[str]) -> dict[str, list[str]]:
  """{utterance id: reference words} of a reference file's lines; a line with only an id
  (`utterance-id<TAB>` or, as in Kaldi's `text`, the bare id) is an empty reference.

  Raises RescoringError, naming `name` and the line, for a line that is not
  'utterance-id<TAB>text', a repeated id, or an id with no hypotheses in `utterances`.
  """
  known = set(utterances)
  references, seen = {}, {}
  for number, line in enumerate(lines, 1):
    if not line.strip():
      continue
    where = f"{name}:{number}"
    line = line.rstrip("\r\n")
    if "\t" in line:
      fields = line.split("\t")
    else:  # Kaldi's `text`: the id, a space and the words, if any.
      fields = (line.split(None, 1) + [""])[:2]
    if len(fields) != 2 or not fields[0].strip():
      raise RescoringError(f"{where}: expected 'utterance-id<TAB>reference text' (or "
                           f"Kaldi's 'utterance-id text'), got {len(fields)} fields")
    utterance = fields[0].strip()
    if utterance in seen:
      raise RescoringError(f"{where}: utterance {utterance!r} already has a reference "
                           f"(line {seen[utterance]})")
    if utterance not in known:
      raise RescoringError(f"{where}: reference id {utterance!r} has no hypotheses in the "
                           "n-best input")
    seen[utterance] = number
    references[utterance] = fields[1].split()
  if not references:
    raise RescoringError(f"{name} holds no reference: give 'utterance-id<TAB>reference "
                         "text' lines")
  return references


def lm_log_probs(model: evaluate.TrainedModel, texts: Sequence[str]) -> dict[str, float]:
  """{text: log p_LM(text)} (natural log, words and `<eos>`; `<eos>` alone for an empty
  text) by `evaluate.score`."""
  unique = list(dict.fromkeys(texts))
  records = evaluate.score(model, unique, keep_blank=True)
  return {text: record["log_prob"] for text, record in zip(unique, records)}


@dataclasses.dataclass(frozen=True)
class Scored:
  """A hypothesis with its LM log-probability and combined score."""
  hypothesis: Hypothesis
  lm_log_prob: float
  score: float


def rerank(hypotheses: Sequence[Hypothesis], log_probs: dict[str, float], lm_weight: float,
           word_penalty: float) -> dict[str, list[Scored]]:
  """{utterance: its hypotheses by combined score, best first}, the utterances in order of
  first appearance; score = first_pass + lm_weight log p_LM + word_penalty |h| (stable
  for ties)."""
  lists = {}
  for hypothesis in hypotheses:
    lm = log_probs[hypothesis.text]
    score = hypothesis.first_pass + lm_weight * lm + word_penalty * len(hypothesis.words)
    lists.setdefault(hypothesis.utterance, []).append(Scored(hypothesis, lm, score))
  return {utterance: sorted(scored, key=lambda s: -s.score)
          for utterance, scored in lists.items()}


def word_errors(reference: Sequence[str], hypothesis: Sequence[str]) -> int:
  """The word-level Levenshtein distance: fewest substitutions, insertions and deletions
  that turn `hypothesis` into `reference`."""
  previous = np.arange(len(hypothesis) + 1)
  for i, word in enumerate(reference, 1):
    current = np.empty_like(previous)
    current[0] = i
    for j, other in enumerate(hypothesis, 1):
      current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (word != other))
    previous = current
  return int(previous[-1])


def word_error_rate(tops: dict[str, Sequence[str]], references: dict[str, list[str]]
                    ) -> float:
  """sum of word_errors(reference, top) / sum of reference lengths over the utterances with
  a reference; `tops`: {utterance: words of its top hypothesis}."""
  errors = sum(word_errors(words, tops[utterance]) for utterance, words in references.items())
  return errors / max(1, sum(len(words) for words in references.values()))


def _tops(lists: dict[str, list[Scored]]) -> dict[str, list[str]]:
  return {utterance: scored[0].hypothesis.words for utterance, scored in lists.items()}


def first_pass_tops(hypotheses: Sequence[Hypothesis]) -> dict[str, list[str]]:
  """{utterance: words of its hypothesis with the best first-pass score} (the first of ties)."""
  return _tops(rerank(hypotheses, {h.text: 0.0 for h in hypotheses}, 0.0, 0.0))


def choose_lm_weight(hypotheses: Sequence[Hypothesis], log_probs: dict[str, float],
                     references: dict[str, list[str]], word_penalty: float,
                     weights: Sequence[float] = LM_WEIGHTS) -> tuple[float, list[dict]]:
  """(the weight with the lowest word error rate after rescoring, the first of ties;
  [{"lm_weight", "wer"}] of every weight tried)."""
  grid = [{"lm_weight": weight, "wer": word_error_rate(
      _tops(rerank(hypotheses, log_probs, weight, word_penalty)), references)}
          for weight in weights]
  return min(grid, key=lambda point: point["wer"])["lm_weight"], grid


def rescore(hypotheses: Sequence[Hypothesis], log_probs: dict[str, float],
            references: Optional[dict[str, list[str]]], lm_weight: Optional[float],
            word_penalty: float) -> tuple[dict[str, list[Scored]], dict]:
  """The re-ranked lists (`rerank`) and {"lm_weight", "word_penalty", "lm_weight_grid"
  (`choose_lm_weight`'s when `lm_weight` is None, which needs references; else []),
  "references" (their number), "wer_before" (first pass), "wer_after" (None without
  references)}."""
  grid = []
  if lm_weight is None:
    lm_weight, grid = choose_lm_weight(hypotheses, log_probs, references, word_penalty)
  lists = rerank(hypotheses, log_probs, lm_weight, word_penalty)

  def wer(tops):
    return word_error_rate(tops, references) if references else None

  return lists, {"lm_weight": lm_weight, "word_penalty": word_penalty, "lm_weight_grid": grid,
                 "references": len(references or {}),
                 "wer_before": wer(first_pass_tops(hypotheses)), "wer_after": wer(_tops(lists))}


def _records(lists: dict[str, list[Scored]]) -> Iterable[dict]:
  """The JSON lines of the re-ranked lists."""
  for utterance, scored in lists.items():
    for rank, item in enumerate(scored, 1):
      hypothesis = item.hypothesis
      yield {"id": utterance, "rank": rank, "text": hypothesis.text,
             "score": item.score, "first_pass_score": hypothesis.first_pass,
             "lm_log_prob": item.lm_log_prob, "words": len(hypothesis.words),
             "line": hypothesis.line, **({"fields": list(hypothesis.fields)}
                                         if hypothesis.fields else {})}


def _read_lines(path: epath.Path, flag: str) -> list[str]:
  if not path.is_file():
    raise RescoringError(f"{flag}={path} not found")
  return text_files.read_lines(path, RescoringError)


def _lm_weight(text: str, has_references: bool) -> Optional[float]:
  """The --lm_weight as a number >= 0, or None for "auto" (which needs references)."""
  if text == AUTO:
    if not has_references:
      raise RescoringError("--lm_weight=auto chooses the weight on references: give "
                           "--references=FILE (or a number for --lm_weight)")
    return None
  try:
    weight = float(text)
  except ValueError:
    weight = math.nan
  if not 0 <= weight < math.inf:
    raise RescoringError(f"--lm_weight={text} must be a number >= 0 or '{AUTO}'")
  return weight


def run(workdir, nbest_path, references_path: Optional[str] = None,
        output: Optional[str] = None, lm_weight: str = "1.0", word_penalty: float = 0.0,
        config=None, acoustic_scale: float = ACOUSTIC_SCALE) -> dict:
  """`--mode=rescore`: reads the n-best file (and references), scores every hypothesis with
  the model of `workdir`, writes the re-ranked lists as JSON lines to `output` (stdout
  when None) and returns the summary.

  Args:
    workdir: the training workdir of the LM (`evaluate.load`, with `config` if given).
    nbest_path: the n-best file, or a Kaldi n-best directory (`parse_kaldi`).
    references_path: the reference file, or None.
    output: the JSON-lines file, or None for stdout.
    lm_weight: a number >= 0, or "auto" (needs references).
    word_penalty: the weight of the word count |h| (negative: a penalty per word).
    config: the LM's config (`evaluate.load`), or None for its saved one.
    acoustic_scale: Kaldi input: the weight of the acoustic cost in the first-pass score.

  Returns:
    {"input", "format", "output", "lists", "hypotheses", "acoustic_scale" (Kaldi input
     only), "lm_weight", "word_penalty",
     "lm_weight_grid" ([{"lm_weight", "wer"}] with "auto", else []), "references",
     "wer_before", "wer_after" (None without references), "step"}.
  """
  if nbest_path is None:
    raise RescoringError("--mode=rescore needs --input=NBEST (docs/testtime.md gives the "
                         "formats)")
  for flag, value in (("word_penalty", word_penalty), ("acoustic_scale", acoustic_scale)):
    if not math.isfinite(value):
      raise RescoringError(f"--{flag}={value} must be a finite number")
  nbest_path = epath.Path(nbest_path)
  if nbest_path.is_dir():
    hypotheses, file_format = parse_kaldi(nbest_path, acoustic_scale), KALDI
    read = list(kaldi_files(nbest_path).values())
  else:
    hypotheses, file_format = parse_nbest(_read_lines(nbest_path, "--input"), str(nbest_path))
    read = [nbest_path]
  references = None
  if references_path is not None:
    references = parse_references(_read_lines(epath.Path(references_path), "--references"),
                                  str(references_path), (h.utterance for h in hypotheses))
  weight = _lm_weight(lm_weight, references is not None)
  json_io.check_output(output, [*(("--input", path) for path in read),
                                ("--references", references_path)])
  model = evaluate.load(workdir, config)
  lists, summary = rescore(hypotheses, lm_log_probs(model, [h.text for h in hypotheses]),
                           references, weight, word_penalty)
  json_io.write_records(_records(lists), output)
  return {"input": str(nbest_path), "format": file_format,
          "output": str(output) if output else None, "lists": len(lists),
          "hypotheses": len(hypotheses),
          **({"acoustic_scale": acoustic_scale} if file_format == KALDI else {}), **summary,
          "step": model.step}
