"""JSON results stay standard (RFC 8259) when a perplexity is infinite."""

import json
import math
import re

import pytest

from attnlm_jax.common import json_io
from attnlm_jax.common.errors import UserError
import tiny_config


def _strict(text: str):
  """json.loads refusing the non-standard constants Infinity, -Infinity and NaN."""
  def refuse(constant):
    raise ValueError(f"{constant} is not JSON")
  return json.loads(text, parse_constant=refuse)


def test_non_finite_floats_are_written_as_names_and_read_back():
  value = {"perplexity": math.inf, "grid": [{"lr": 0.1, "nll": -math.inf}, math.nan, 2.5],
           "word": "infinity"}
  text = json_io.dumps(value, indent=1)
  assert _strict(text) == {"perplexity": "inf", "grid": [{"lr": 0.1, "nll": "-inf"}, "nan", 2.5],
                           "word": "infinity"}
  again = json_io.loads(text)
  assert again["perplexity"] == math.inf and again["grid"][0]["nll"] == -math.inf
  assert math.isnan(again["grid"][1]) and again["grid"][2] == 2.5
  assert again["word"] == "infinity"


def test_files_written_before_are_still_read():
  assert json_io.loads('{"perplexity": Infinity}') == {"perplexity": math.inf}
  with pytest.raises(ValueError):
    _strict('{"perplexity": Infinity}')


def test_every_committed_result_is_standard_json():
  paths = [*tiny_config.COMMITTED_RESULTS.glob("**/*.json"),
           *(tiny_config.REPO / "benchmarks" / "results").glob("**/*.json*")]
  assert len(paths) > 20
  for path in paths:
    text = path.read_text()
    for document in (text.splitlines() if path.suffix == ".jsonl" else [text]):
      _strict(document)


def test_an_output_that_is_a_file_read_is_refused(tmp_path):
  """Writing it would overwrite the input: the same path, another spelling of it, a link."""
  read = tmp_path / "in.txt"
  read.write_text("the cat\n")
  (tmp_path / "link.txt").symlink_to(read)
  inputs = [("--references", None), ("--input", read)]
  json_io.check_output(str(tmp_path / "out.txt"), inputs)
  for output in (read, tmp_path / "new" / ".." / "in.txt", tmp_path / "link.txt"):
    with pytest.raises(UserError, match=re.escape(
        f"--output={output} would overwrite {read}, read by --input: name another file")):
      json_io.check_output(str(output), inputs)
  assert read.read_text() == "the cat\n"


def test_a_json_file_is_read_as_written_or_as_results_and_written_whole(tmp_path):
  path = tmp_path / "made" / "value.json"
  json_io.write_json(path, {"words": ["nan", "cat"], "perplexity": math.inf})
  assert path.read_text().endswith("\n") and not (path.parent / "value.json.partial").exists()
  assert json_io.read_json(path, UserError, "FIX") == {"words": ["nan", "cat"],
                                                       "perplexity": "inf"}
  assert json_io.read_json(path, UserError, "FIX", results=True)["perplexity"] == math.inf
  path.write_text('{"words": [')
  with pytest.raises(UserError, match=re.escape(f"{path} is not one JSON value (Expecting "
                                                "value, line 1): FIX")):
    json_io.read_json(path, UserError, "FIX")
  path.write_bytes(b'{"word": "\xff"}')
  with pytest.raises(UserError, match=re.escape("(byte 10 is not UTF-8): FIX")):
    json_io.read_json(path, UserError, "FIX")
