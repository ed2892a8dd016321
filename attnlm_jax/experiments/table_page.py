"""results.md of a table: its rows beside the printed numbers, the notes on how they ran, and
each row's validation perplexity epoch by epoch beside the reference row's.

`format_markdown` renders the results.json dict that `runner.write_results` writes; the
row statuses below are the words both use.
"""

import collections
from typing import Sequence

from attnlm_jax.experiments import markdown
from attnlm_jax.experiments import row_status
from attnlm_jax.experiments import runs



def _is_running(record: dict) -> bool:
  """True for a row that has started and not finished."""
  return record["status"].startswith(row_status.RUNNING)


def _is_diverged(record: dict) -> bool:
  """True for a row whose last session diverged."""
  return record["status"].startswith(row_status.DIVERGED)


def _markdown_cells(record: dict) -> list[str]:
  """One results.md line of a row: a running row shows its epochs done of the most (and its
  best epoch so far) and, as `valid`, its best validation perplexity so far."""
  number = markdown.format_number
  perplexities = [markdown.perplexity_cell(record, key) for key in runs.RUN_KEYS]
  if record["status"] == row_status.NOT_STARTED:
    epochs = "not run"
  elif _is_diverged(record):
    epochs = f"{record['status']} (epoch {record['epochs_run'] + 1})"
  elif _is_running(record):
    best = f" (best {record['best_epoch']})" if record["best_epoch"] else ""
    epochs = (f"{row_status.RUNNING}: {record['epochs_run']} of "
              f"{markdown.count(record['num_epochs'])}{best}")
    so_far = record["best_valid_perplexity"]
    if so_far is not None and record.get("every_token_predicted") is not False:
      perplexities[0] = f"{number(so_far)} (so far)"
  elif record["status"].startswith(row_status.STALE):
    epochs = record["status"]  # An interpolation whose member trained again: numbers of old.
  elif record["epochs_run"] is None:
    epochs = "-"
  elif record.get("untested_best_epoch"):   # Results of pages written before the key lack it.
    epochs = (f"{record['epochs_run']} ({record['untested_best_epoch']}, tested "
              f"{record['best_epoch']})")
  else:
    epochs = f"{record['epochs_run']} ({record['best_epoch']})"
  paper, differences = record["paper"], record["differences"] or {}
  return [record["name"], record["model"], markdown.count(record["params"]), epochs,
          *perplexities,
          markdown.valid_test_cell(paper["valid"], paper["test"]) if paper else "-",
          f"{paper['paper']}, {paper['convention']}" if paper else "-",
          *(markdown.difference_cell(differences.get(split)) for split in ("valid", "test"))]


def _tagger_note(record: dict) -> str:
  """results.md's note on a tagger row: its accuracy, and at the words read as `<unk>`."""
  unk = record.get("test_accuracy_unk")
  shown = (f" with the words outside the LM's vocabulary read as `<unk>` ({100 * unk:.1f}% "
           "at those)" if unk is not None else "")
  return (f"- `{record['name']}`: POS tagging accuracy {100 * record['test_accuracy']:.1f}% on "
          f"the CoNLL-2000 test split{shown}.")


def _first_words_note(record: dict) -> str:
  """results.md's note on a row trained without a start symbol."""
  return (f"- `{record['name']}` trained without a start symbol (`data.start_symbol=False`, as "
          "the released code): it never predicts a sentence's first word, so its standard-rule "
          "cells read n/a, and the validation perplexities of its log (the epoch table, the "
          "curves) leave those words out; compare it under the released rule.")


def _untested_best_note(record: dict) -> str:
  """results.md's note on a row whose test is not of its best epoch's parameters."""
  curve = dict(record["valid_curve"])
  best, tested = record["untested_best_epoch"], record["best_epoch"]
  return (f"- `{record['name']}`'s test is of epoch {tested}'s parameters (valid perplexity "
          f"{markdown.format_number(curve[tested])}), not of its best epoch {best}'s "
          f"({markdown.format_number(curve[best])}): that epoch's checkpoint was not in the "
          "workdir where the run finished.")


def _running_note(record: dict) -> str:
  """results.md's note on a running row: epochs done, best so far, last epoch's time."""
  note = (f"- `{record['name']}` is still training: {record['epochs_run']} of "
          f"{markdown.count(record['num_epochs'])} epochs done")
  if record["best_valid_perplexity"] is not None:
    note += (f", best valid perplexity so far "
             f"{markdown.format_number(record['best_valid_perplexity'])} "
             f"(epoch {record['best_epoch']})")
  if record["last_epoch_seconds"] is not None:
    note += f", last epoch {record['last_epoch_seconds']:,.1f} s"
  if record.get("patience_ends") is not None:  # Pages written before the key lack it.
    note += (f"; early stopping ends it after epoch {record['patience_ends']} unless an "
             f"epoch before then improves on epoch {record['best_epoch']}")
  return note + "."


def _diverged_note(record: dict) -> str:
  """results.md's note on a diverged row: where, at what learning rate, and why."""
  diverged = record["diverged"]
  return (f"- `{record['name']}` diverged at step {diverged['step']} (learning rate "
          f"{diverged['learning_rate']:g}): {diverged['reason']}.")


def _learning_rate_notes(rows: Sequence[dict]) -> list[str]:
  """results.md's notes on the rows whose first learning rate is not the one most rows start
  at (a row's config may lower it where the table's rate does not train it; none when all
  rows agree or the rows predate the record)."""
  rates = [r.get("learning_rate") for r in rows if r.get("learning_rate") is not None]
  if len(set(rates)) < 2:
    return []
  usual = collections.Counter(rates).most_common(1)[0][0]
  by_rate = {}
  for record in rows:
    if record.get("learning_rate") not in (None, usual):
      by_rate.setdefault(record["learning_rate"], []).append(f"`{record['name']}`")
  return [f"- {markdown.listing(names)} start{'s' if len(names) == 1 else ''} at learning rate "
          f"{rate} ({'its config' if len(names) == 1 else 'their configs'}; the other rows at "
          f"{usual})." for rate, names in by_rate.items()]


# How a row's training batches are made (`batch_kind`), in the page's words.
BATCH_KINDS = {"bucketed": "batches of sentences of similar length",
               "random": "batches of random sentences",
               "corpus_order": "batches of consecutive sentences in corpus order",
               "stream": "windows of one token stream, the state carried across them"}


def batch_kind(data_config) -> str:
  """A key of BATCH_KINDS for a config's `data` section."""
  if data_config.get("span") == "stream":
    return "stream"
  if data_config.get("bucket"):
    return "bucketed"
  return "random" if data_config.get("shuffle", True) else "corpus_order"


def _batching_notes(rows: Sequence[dict]) -> list[str]:
  """results.md's note on the rows whose batches are made otherwise than most rows' (the
  `conv1x1` batch norm needs random sentences: docs/models.md): each kind with its rows, the
  most common kind last, as "the other rows"."""
  by_kind = collections.defaultdict(list)
  for row in rows:
    if row.get("batches"):
      by_kind[row["batches"]].append(f"`{row['name']}`")
  if len(by_kind) < 2:
    return []
  usual = max(by_kind, key=lambda kind: len(by_kind[kind]))
  others = [f"{markdown.listing(names)} on {BATCH_KINDS[kind]}" for kind, names in by_kind.items()
            if kind != usual]
  return [f"- Training batches: {'; '.join(others)}; the other rows on {BATCH_KINDS[usual]} "
          "(docs/models.md)."]


def _ran_on_notes(rows: Sequence[dict]) -> list[str]:
  """results.md's notes on where the rows trained: one line per place, naming its rows, each
  with its fastest and median seconds of an epoch there when known, or, for a running row
  with none timed there yet, saying so (the rows whose logs do not say where are left out),
  and what the two times mean."""
  places = {}
  for record in rows:
    for place in record["ran_on"]:
      fastest, median = (record[key].get(place)
                         for key in ("fastest_epoch_seconds", "epoch_seconds"))
      if fastest is not None:
        times = f" ({fastest:,.1f} s its fastest epoch, {median:,.1f} s the median)"
      else:
        times = " (no epoch timed there yet)" if _is_running(record) else ""
      places.setdefault(place, []).append(f"`{record['name']}`{times}")
  timed = any(record["epoch_seconds"] for record in rows)
  return [*(f"- Trained on {place}: {', '.join(names)}." for place, names in places.items()),
          *(["- An epoch's time is its steps, its validation and its saves. The fastest "
             "epoch is a row's cost on a quiet machine; the median also counts epochs slowed "
             "by compiling or by other work on the machine."] if timed else [])]


def _code_note(rows: Sequence[dict]) -> list[str]:
  """results.md's note on the code that trained the rows, each with the `code_version`s of
  its sessions (a commit, "+changes" when the checkout's code differed from it); none when no
  row's log records it (older logs do not: pages written before the key lack it)."""
  named = [f"`{r['name']}` {', '.join(r['code_versions'])}" for r in rows
           if r.get("code_versions")]
  return [f"- Code that trained them (`code_version` in each log): {'; '.join(named)}."
          ] if named else []


def epoch_differences(rows: Sequence[dict], reference: str) -> dict[str, list]:
  """Each row's validation perplexity at every epoch relative to the `reference` row's, in
  percent ((row - reference) / reference x 100), for the epochs both have run:
  {row: [[epoch, percent], ...]} from the rows' `valid_curve`s ([[epoch, perplexity], ...]);
  rows whose perplexity leaves out the first words (`markdown.standard_perplexity`) are
  not compared."""
  curves = {r["name"]: dict(r["valid_curve"]) for r in rows
            if r.get("every_token_predicted") is not False}
  base = curves[reference]
  return {name: [[epoch, round(100 * (p - base[epoch]) / base[epoch], 3)]
                 for epoch, p in curve.items() if epoch in base]
          for name, curve in curves.items() if name != reference}


def _epoch_section(summary: dict) -> list[str]:
  """results.md's table of validation perplexity per epoch beside the reference row's (and,
  with a tolerance, whether each row stays within it)."""
  reference, rows = summary["reference"], summary["rows"]
  differences = summary["epoch_differences"]
  columns = [dict(r["valid_curve"]) for r in rows] + [dict(d) for d in differences.values()]
  formats = [markdown.format_number] * len(rows) + [lambda x: f"{x:+.2f}%"] * len(differences)
  headers = ("epoch", *(r["name"] for r in rows), *(f"{n} vs {reference}" for n in differences))
  epochs = sorted(set().union(*columns))
  lines = [[str(epoch), *(fmt(c[epoch]) if epoch in c else "-"
                          for c, fmt in zip(columns, formats))] for epoch in epochs]
  tolerance = summary["tolerance"]
  verdicts = [f"- `{name}`: " + ("within" if d and all(abs(x) <= tolerance for _, x in d)
                                 else "not within" if d else "no epoch yet to compare")
              + f" {tolerance:g}% of `{reference}` at every epoch it has run."
              for name, d in differences.items()] if tolerance is not None else []
  return ["", f"Validation perplexity after every epoch, and its difference to `{reference}`:",
          "", markdown.markdown_table(headers, lines), *([""] + verdicts if verdicts else [])]


def format_markdown(summary: dict) -> str:
  """results.md of a results.json dict."""
  headers = ("row", "model / config", "params", "epochs (best)", "valid", "test",
             "valid (paper conv.)", "test (paper conv.)", "printed valid / test",
             "printed by, perplexity rule", "difference valid", "difference test")
  table = markdown.markdown_table(
      headers, [_markdown_cells(record) for record in summary["rows"]])
  notes = [_tagger_note(r) for r in summary["rows"] if r.get("test_accuracy")]
  notes += [f"- `{r['name']}` {r['note']}." for r in summary["rows"] if r.get("note")]
  notes += [_first_words_note(r) for r in summary["rows"]
            if r.get("every_token_predicted") is False]
  notes += _learning_rate_notes(summary["rows"])
  notes += _batching_notes(summary["rows"])
  notes += [_untested_best_note(r) for r in summary["rows"] if r.get("untested_best_epoch")]
  notes += [_running_note(r) for r in summary["rows"] if _is_running(r)]
  notes += [_diverged_note(r) for r in summary["rows"] if _is_diverged(r)]
  notes += _ran_on_notes(summary["rows"])
  notes += _code_note(summary["rows"])
  return "\n".join([
      f"# Table `{summary['table']}`: {summary['title']}", "",
      f"Reproduce with `{summary['command']}` (results of {summary['date']}).", "", table, "",
      "`valid` and `test` predict every token; `(paper conv.)` is the released code's rule "
      "(a sentence's first word not predicted but counted). A difference is the run's "
      "perplexity under the printed number's rule (the standard one when the paper does not "
      "say) minus the printed one, and its percentage of the printed one. Epochs: run "
      "(best); the best epoch's parameters are evaluated.", *([""] + notes if notes else []),
      *(_epoch_section(summary) if summary.get("reference") else []), ""])
