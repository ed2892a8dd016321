"""JSON that stays standard (RFC 8259) when a number is not finite: `dumps` writes an infinite
perplexity as the string "inf" (and "-inf", "nan"), `loads` reads them back as floats;
`write_json` writes such a file whole or not at all, `read_json` and `read_records` read a
file of one JSON value or of JSON lines with a one-line error naming it, and `write_records`
writes JSON lines to a file the user names, or to stdout."""

import json
import math
import os
import sys
from typing import Any, Iterable, Optional, Type

from etils import epath

from attnlm_jax.common.errors import UserError

NON_FINITE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}


def _named(value: Any) -> Any:
  """`value` with each non-finite float replaced by its name in NON_FINITE."""
  if isinstance(value, float) and not math.isfinite(value):
    return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
  if isinstance(value, dict):
    return {key: _named(item) for key, item in value.items()}
  if isinstance(value, (list, tuple)):
    return [_named(item) for item in value]
  return value


def _numbers(value: Any) -> Any:
  """`value` with each string named in NON_FINITE replaced by its float."""
  if isinstance(value, str):
    return NON_FINITE.get(value, value)
  if isinstance(value, dict):
    return {key: _numbers(item) for key, item in value.items()}
  if isinstance(value, list):
    return [_numbers(item) for item in value]
  return value


def dumps(value: Any, **kwargs) -> str:
  """`json.dumps` of `value` (its keyword arguments too), non-finite floats as strings."""
  return json.dumps(_named(value), allow_nan=False, **kwargs)


def loads(text: str) -> Any:
  """What `dumps` wrote: its strings "inf", "-inf" and "nan" as floats. For files of
  results only: a string value that is one of those names becomes a float."""
  return _numbers(json.loads(text))


def read_json(path: epath.Path, error_type: Type[UserError], fix: str, *,
              results: bool = False) -> Any:
  """The JSON value the file at `path` holds (read by `loads` with `results`, else as written:
  a vocabulary's word "nan" stays a word); `error_type` naming the file, where it fails and
  `fix` when it holds none, or more than one (cut off, empty, two lines), or is not UTF-8."""
  try:
    text = path.read_text()
    return loads(text) if results else json.loads(text)
  except json.JSONDecodeError as e:
    problem = f"{e.msg}, line {e.lineno}"
  except UnicodeDecodeError as e:
    problem = f"byte {e.start} is not UTF-8"
  raise error_type(f"{path} is not one JSON value ({problem}): {fix}")


def write_json(path: epath.Path, value: Any) -> None:
  """`dumps` of `value` (indented) into the file at `path`, its directory made, whole or not at
  all even if stopped while writing (through `path`.partial)."""
  path.parent.mkdir(parents=True, exist_ok=True)
  partial = path.parent / f"{path.name}.partial"
  partial.write_text(dumps(value, indent=1) + "\n")
  partial.replace(path)


def read_records(path: epath.Path, error_type: Type[UserError], fix: str) -> list[dict]:
  """The records (`loads`) of a file of JSON lines, one a line, blank lines skipped. A last line
  without its newline that is not whole is left out: one being written (a log read while its
  run appends to it), or cut off by a hard kill. Any other line that is not JSON is
  `error_type` naming the file, the line and `fix`."""
  text = path.read_text()
  lines = text.splitlines()
  records = []
  for number, line in enumerate(lines, 1):
    if not line.strip():
      continue
    try:
      records.append(loads(line))
    except json.JSONDecodeError as e:
      if number == len(lines) and not text.endswith("\n"):
        break
      raise error_type(f"{path}, line {number}, is not a JSON record ({e.msg}): {fix}") from None
  return records


def _same_file(a, b) -> bool:
  """Whether the paths `a` and `b` name one file (also through a link or another spelling)."""
  try:
    return os.path.samefile(a, b)
  except OSError:  # One is missing, or remote (gs://): the same only as the same path.
    return os.path.abspath(a) == os.path.abspath(b)


def check_output(output: Optional[str], inputs: Iterable[tuple[str, Any]] = ()) -> None:
  """UserError when --output names a directory, or a file of `inputs` ((flag, path) pairs of
  the files read; a path None is skipped), which writing would overwrite (checked before the
  work that fills it)."""
  if not output:
    return
  if epath.Path(output).is_dir():
    raise UserError(f"--output={output} is a directory: name a file in it, e.g. "
                    f"--output={epath.Path(output) / 'scores.jsonl'}")
  for flag, path in inputs:
    if path is not None and _same_file(output, path):
      raise UserError(f"--output={output} would overwrite {path}, read by {flag}: name "
                      "another file for --output")


def write_records(records: Iterable[dict], output: Optional[str]) -> None:
  """One `dumps` line per record into the file `output` (its directory made), or stdout."""
  lines = (dumps(record) + "\n" for record in records)
  if not output:
    sys.stdout.writelines(lines)
    return
  path = epath.Path(output)
  try:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(lines))
  except OSError as e:
    raise UserError(f"cannot write --output={output}: {e.strerror or e}") from None
