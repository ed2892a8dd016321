"""The results tables of the README, of each table's page (with its verdicts over seeds,
`seeds.py`) and of the salton_ptb findings (`findings.py`), written from the committed results
files (`docs/results/<table>/results.json` and `testtime.json`, the newest benchmarks in
`benchmarks/results/`), so that every figure there is a file's value.

    python -m attnlm_jax.experiments.summary          # rewrites the tables in place
    python -m attnlm_jax.experiments.summary --check  # exit status 1 when one is out of date

A table sits between `<!-- BEGIN name -->` and `<!-- END name -->` lines (`blocks`).
"""

import pathlib
import re
import sys
from typing import Optional, Sequence

from attnlm_jax.common import checkout
from attnlm_jax.common import errors
from attnlm_jax.common import json_io
from attnlm_jax.experiments import findings
from attnlm_jax.experiments import markdown
from attnlm_jax.experiments import printed
from attnlm_jax.experiments import row_status
from attnlm_jax.experiments import seeds
from attnlm_jax.experiments import tables

RESULTS_DIR = "docs/results"
BENCHMARKS_DIR = "benchmarks/results"
TESTTIME_METHODS = (("cache", "cache"), ("dynamic_sgd", "dynamic SGD"),
                    ("dynamic_rms", "dynamic RMS"))


def _order(path: pathlib.Path) -> tuple[int, str]:
  """A table's folder in the order of `tables.TABLES` (others after, by name)."""
  names = list(tables.TABLES)
  name = path.parent.name
  return (names.index(name) if name in names else len(names), name)


def _tables(repository: pathlib.Path) -> list[dict]:
  """Every committed table's results.json, in the order of `tables.TABLES`."""
  paths = sorted((repository / RESULTS_DIR).glob("*/results.json"), key=_order)
  return [json_io.loads(path.read_text()) for path in paths]


def _seed_percents(table: dict) -> dict[str, list[float]]:
  """Each row's finished seeds' test differences to its printed number, %, by `base_row`."""
  return {row: [test["percent"] for run in runs
                if (test := (run.get("differences") or {}).get("test"))]
          for row, runs in seeds.finished_seeds(table).items()}


def _judged(row: dict, percents: dict[str, list[float]]) -> str:
  """A row's last cell: its status until it finishes, then the verdict over every seed of it
  (`printed.verdict`), the tagger's accuracy, or that no printed number compares."""
  if row["status"] != row_status.FINISHED:
    return row["status"]
  if row.get("paper"):
    return printed.verdict(percents.get(tables.base_row(row["name"]), []))
  if row.get("test_accuracy") is not None:  # The POS tagger: no perplexity.
    return f"tagging accuracy {100 * row['test_accuracy']:.1f}%"
  return "no printed row"


def _line(table: dict, runs: Sequence[dict], link: str, committed: pathlib.Path,
          judged: str) -> list[str]:
  """The cells of one row's line, from `runs`: the row itself, or its finished seeds (each
  number cell then lists theirs, in table order)."""
  name = runs[0]["name"] if len(runs) == 1 else tables.base_row(runs[0]["name"])
  paper = runs[0].get("paper")

  def per_run(cell) -> str:
    return ", ".join(cell(run) for run in runs)

  return [f"[{table['table']}]({link}/README.md)",
          f"[{name}]({link}/{name}/)" if (committed / name).is_dir() else name,
          per_run(lambda run: markdown.perplexity_cell(run, "test_perplexity")),
          per_run(lambda run: markdown.perplexity_cell(run, "test_perplexity_paper_convention")),
          f"{markdown.format_number(paper['test'])} ({_rule(paper['convention'])})"
          if paper else "-",
          per_run(lambda run: markdown.difference_cell(
              (run.get("differences") or {}).get("test"))) if paper else "-",
          judged]


def results_rows(table: dict, link: str, committed: pathlib.Path) -> list[list[str]]:
  """One line per row of a table (its page): its test perplexity under both rules, the
  printed test number, the difference and the verdict (over every seed of the row); `link` is
  the path from the page to the table's folder `committed` (a row's name links to its folder
  there)."""
  percents = _seed_percents(table)
  return [_line(table, [row], link, committed, _judged(row, percents))
          for row in table["rows"]]


def finished_rows(table: dict, link: str, committed: pathlib.Path) -> list[list[str]]:
  """One line per row with a finished seed (the README), its seed rows folded into it: the
  numbers of every finished seed side by side, and the verdict over them. Rows still training
  are left to the table's page."""
  percents = _seed_percents(table)
  return [_line(table, runs, link, committed, _judged(runs[0], percents))
          for runs in seeds.finished_seeds(table).values()]


def _rule(convention: str) -> str:
  """A printed number's rule in a word."""
  return {printed.RELEASED_CODE_RULE: "released rule", printed.STANDARD_RULE: "standard",
          printed.NOT_STATED: "rule not stated"}[convention]


RESULTS_HEADERS = ("table", "row", "test", "test, released rule", "printed test",
                   "difference", "verdict")


def results_table(repository: pathlib.Path, prefix: str = RESULTS_DIR,
                  only: Optional[str] = None) -> str:
  """The results table of every committed table, its finished rows with their seeds folded
  in (the README), or of every row of table `only` (its page); links relative to `prefix` (the
  path from the page to docs/results)."""
  lines = []
  for table in _tables(repository):
    if only is None:
      lines += finished_rows(table, f"{prefix}/{table['table']}",
                             repository / RESULTS_DIR / table["table"])
    elif only == table["table"]:
      lines += results_rows(table, ".", repository / RESULTS_DIR / table["table"])
  return markdown.markdown_table(RESULTS_HEADERS, lines)


def testtime_table(repository: pathlib.Path) -> str:
  """Test perplexity (every token predicted) of each row alone and with each test-time
  method, from the tables' testtime.json."""
  lines = []
  for path in sorted((repository / RESULTS_DIR).glob("*/testtime.json"), key=_order):
    page = json_io.loads(path.read_text())
    for row in page["rows"]:
      results = row.get("results") or {}
      if not results:
        continue
      lines.append([f"[{page['table']}]({RESULTS_DIR}/{page['table']}/testtime.md)",
                    row["name"], markdown.format_number(row.get("test_perplexity")),
                    *(markdown.format_number((results.get(key) or {}).get("perplexity"))
                      for key, _ in TESTTIME_METHODS)])
  return markdown.markdown_table(("table", "row", "alone", *(n for _, n in TESTTIME_METHODS)),
                                 lines)


def newest_benchmark(repository: pathlib.Path, pattern: str) -> pathlib.Path:
  """The newest results file matching `pattern` (each file's name starts with its date)."""
  return sorted((repository / BENCHMARKS_DIR).glob(pattern))[-1]


def _benchmark_records(path: pathlib.Path) -> list[dict]:
  """The records of a committed benchmark's results file."""
  return json_io.read_records(path, errors.UserError, "restore the file from git")


def performance_table(repository: pathlib.Path) -> str:
  """Training tokens per second of the project against PyTorch: each side in its own process
  as its users run it (the newest processes benchmark: `python -m attnlm_jax.main` against
  pytorch/examples' main.py), then both loops in one process (the newest epoch benchmark)."""
  processes = newest_benchmark(repository, "*_processes.jsonl")
  epochs = newest_benchmark(repository, "*_epoch*.jsonl")
  lines = [[f"own processes: `{r['pair']}`", r["cpu"], f"{r['tokens_per_s']['attnlm']:,.1f}",
            f"{r['tokens_per_s']['examples']:,.1f}", f"{r['ratio_attnlm_over_examples']:.3f}"]
           for r in _benchmark_records(processes)]
  lines += [[f"one process: `{r['command'].split('benchmarks.epoch ')[-1]}`", r["cpu"],
             f"{r['tokens_per_s']['jax']:,.1f}", f"{r['tokens_per_s']['torch']:,.1f}",
             f"{r['ratio_jax_over_torch']['tokens_per_s']:.3f}"]
            for r in _benchmark_records(epochs) if "torch" in r.get("tokens_per_s", {})]
  table = markdown.markdown_table(("measurement", "CPU", "JAX tokens/s", "PyTorch tokens/s",
                                   "JAX / PyTorch"), lines)
  sources = [f"[{path.relative_to(repository)}]({path.relative_to(repository)})"
             for path in (processes, epochs)]
  return (f"{table}\n\nFrom {sources[0]} (`python -m benchmarks.processes "
          f"--examples=CHECKOUT --pairs=PAIR`) and {sources[1]} (`python -m benchmarks.epoch "
          f"ARGUMENTS`).")


def blocks(repository: pathlib.Path) -> dict[pathlib.Path, dict[str, str]]:
  """Each page's tables: {page: {block name: Markdown}}."""
  pages = {repository / "README.md": {
      "results_table": results_table(repository),
      "testtime_table": testtime_table(repository),
      "performance_table": performance_table(repository)}}
  for table in _tables(repository):
    page = repository / RESULTS_DIR / table["table"] / "README.md"
    known = tables.TABLES.get(table["table"])
    comparisons = known.comparisons if known else ()
    if page.exists():
      pages[page] = {"results_table": results_table(repository, only=table["table"])}
      if comparisons:
        pages[page]["seeds_table"] = seeds.seeds_table(table, comparisons)
    page = repository / RESULTS_DIR / table["table"] / findings.PAGE
    if table["table"] == findings.TABLE and page.exists():
      pages[page] = {"findings_table": findings.findings_table(table)}
  return pages


def replace_block(text: str, name: str, content: str) -> str:
  """`text` with the lines between its BEGIN and END lines of block `name` set to
  `content`; ValueError when the page lacks them."""
  begin, end = f"<!-- BEGIN {name} -->", f"<!-- END {name} -->"
  pattern = re.compile(re.escape(begin) + r"\n.*?" + re.escape(end), re.S)
  if not pattern.search(text):
    raise ValueError(f"no {begin} ... {end} lines")
  return pattern.sub(lambda _: f"{begin}\n{content}\n{end}", text)


def update(repository: pathlib.Path = checkout.REPOSITORY,
           check: bool = False) -> list[pathlib.Path]:
  """Rewrites every page's tables (with `check`, only compares); returns the pages whose
  tables were (or, with `check`, would be) changed."""
  changed = []
  for page, contents in blocks(repository).items():
    text = page.read_text()
    new = text
    for name, content in contents.items():
      new = replace_block(new, name, content)
    if new != text:
      changed.append(page)
      if not check:
        page.write_text(new)
  return changed


def main(argv: Sequence[str]) -> int:
  check = "--check" in argv[1:]
  changed = update(checkout.REPOSITORY, check=check)
  for page in changed:
    print(f"{page.relative_to(checkout.REPOSITORY)}: "
          f"{'out of date' if check else 'rewritten'}", file=sys.stderr)
  return 1 if check and changed else 0


if __name__ == "__main__":
  sys.exit(main(sys.argv))
