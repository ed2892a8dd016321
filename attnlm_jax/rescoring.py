"""Rescoring n-best lists (speech recognition, translation) with a trained language model.

Every hypothesis h of an utterance gets the combined score

    score(h) = first_pass(h) + lm_weight * log p_LM(h) + word_penalty * |h|

where log p_LM(h) is the natural-log probability of its words and the closing `<eos>` from
`evaluate.score` (the code of `--mode=score`), and |h| its number of words. Scores are log
domain, higher is better (negate costs first). Each list is re-ranked by the combined score,
best first (ties keep the input order).

Input formats (a file's format is that of its first non-blank line):
- tab-separated: `utterance-id<TAB>first-pass score<TAB>hypothesis text`;
- Moses: `id ||| hypothesis text ||| feature scores ||| total score` (more ` ||| ` fields
  are kept in `fields` but not read).
A hypothesis needs at least one word. References: `utterance-id<TAB>reference text`, one
per utterance. The word error rate of a set of utterances is the summed word-level edit
distance (Levenshtein: substitutions, insertions, deletions) of their top hypotheses to
their references over the summed reference length. With `lm_weight="auto"` the weight is
the one of LM_WEIGHTS with the lowest word error rate after rescoring on the given
references (ties: the smallest), i.e. chosen on this input as a development set.
"""

import dataclasses
import json
import math
import sys
from typing import Iterable, Optional, Sequence

from etils import epath
import numpy as np

from attnlm_jax import evaluate
from attnlm_jax.errors import UserError

TAB, MOSES = "tab", "moses"
MOSES_SEPARATOR = "|||"
AUTO = "auto"
# The LM weights tried by lm_weight="auto".
LM_WEIGHTS = tuple(round(0.1 * i, 1) for i in range(21))


class RescoringError(UserError):
  """An n-best or reference file that cannot be read, or bad rescoring settings."""


@dataclasses.dataclass(frozen=True)
class Hypothesis:
  """One line of an n-best file."""
  utterance: str
  text: str
  first_pass: float
  line: int                       # 1-based line number in the file
  fields: tuple[str, ...] = ()    # Moses: the feature scores and any further fields

  @property
  def words(self) -> list[str]:
    return self.text.split()


def _fields(line: str, file_format: str) -> list[str]:
  if file_format == MOSES:
    return [field.strip() for field in line.split(MOSES_SEPARATOR)]
  return line.split("\t")


def _number(text: str, where: str) -> float:
  """A finite float, else RescoringError naming `where`."""
  try:
    value = float(text)
  except ValueError:
    value = math.nan
  if not math.isfinite(value):
    raise RescoringError(f"{where}: first-pass score {text!r} is not a number")
  return value


def parse_nbest(lines: Sequence[str], name: str) -> tuple[list[Hypothesis], str]:
  """The hypotheses of an n-best file's lines and its format (TAB or MOSES).

  Blank lines are skipped. Raises RescoringError, naming `name` and the line, for a line
  with too few fields, a score that is not a finite number, a hypothesis without words, or
  no hypothesis at all.
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
    if not text.split():
      raise RescoringError(f"{where}: the hypothesis of {utterance.strip()!r} has no words")
    hypotheses.append(Hypothesis(utterance.strip(), " ".join(text.split()),
                                 _number(score, where), number, extra))
  return hypotheses, file_format


def parse_references(lines: Sequence[str], name: str,
                     utterances: Iterable[str]) -> dict[str, list[str]]:
  """{utterance id: reference words} of a reference file's lines.

  Raises RescoringError, naming `name` and the line, for a line that is not
  'utterance-id<TAB>text', a repeated id, or an id with no hypotheses in `utterances`.
  """
  known = set(utterances)
  references, seen = {}, {}
  for number, line in enumerate(lines, 1):
    if not line.strip():
      continue
    where = f"{name}:{number}"
    fields = line.rstrip("\r\n").split("\t")
    if len(fields) != 2 or not fields[0].strip():
      raise RescoringError(f"{where}: expected 2 tab-separated fields "
                           f"'utterance-id<TAB>reference text', got {len(fields)}")
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
  """{text: log p_LM(text)} (natural log, words and `<eos>`) by `evaluate.score`."""
  unique = list(dict.fromkeys(texts))
  return {text: record["log_prob"] for text, record in zip(unique, evaluate.score(model,
                                                                                  unique))}


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
  return path.read_text().splitlines()


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
        config=None) -> dict:
  """`--mode=rescore`: reads the n-best file (and references), scores every hypothesis with
  the model of `workdir`, writes the re-ranked lists as JSON lines to `output` (stdout
  when None) and returns the summary.

  Args:
    workdir: the training workdir of the LM (`evaluate.load`, with `config` if given).
    nbest_path: the n-best file.
    references_path: the reference file, or None.
    output: the JSON-lines file, or None for stdout.
    lm_weight: a number >= 0, or "auto" (needs references).
    word_penalty: the weight of the word count |h| (negative: a penalty per word).

  Returns:
    {"input", "format", "output", "lists", "hypotheses", "lm_weight", "word_penalty",
     "lm_weight_grid" ([{"lm_weight", "wer"}] with "auto", else []), "references",
     "wer_before", "wer_after" (None without references), "step"}.
  """
  if nbest_path is None:
    raise RescoringError("--mode=rescore needs --input=NBEST (docs/testtime.md gives the "
                         "formats)")
  nbest_path = epath.Path(nbest_path)
  hypotheses, file_format = parse_nbest(_read_lines(nbest_path, "--input"), str(nbest_path))
  references = None
  if references_path is not None:
    references = parse_references(_read_lines(epath.Path(references_path), "--references"),
                                  str(references_path), (h.utterance for h in hypotheses))
  weight = _lm_weight(lm_weight, references is not None)
  model = evaluate.load(workdir, config)
  lists, summary = rescore(hypotheses, lm_log_probs(model, [h.text for h in hypotheses]),
                           references, weight, word_penalty)
  records = (json.dumps(record) + "\n" for record in _records(lists))
  if output:
    output = epath.Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text("".join(records))
  else:
    sys.stdout.writelines(records)
  return {"input": str(nbest_path), "format": file_format,
          "output": str(output) if output else None, "lists": len(lists),
          "hypotheses": len(hypotheses), **summary, "step": model.step}
