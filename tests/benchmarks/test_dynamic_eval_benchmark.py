"""benchmarks.dynamic_eval: a pass of dynamic evaluation with windows padded to different
multiples."""

import json
import subprocess
import sys

import pytest

import tiny_config

COMMAND = [sys.executable, "-m", "benchmarks.dynamic_eval", "--config=configs/demo.py",
           "--config.model.hidden_size=16"]


def test_each_multiple_pads_the_same_windows_to_its_own_widths():
  """One JSON line: every multiple read the same windows, each padded to a multiple of its
  own at least as long as its longest row, so the smaller multiple pads less; a search's
  seconds are its first pass and ten later ones, and each speedup is the first multiple's
  seconds over its own."""
  out = subprocess.run([*COMMAND, "--windows=12", "--multiples=16,4", "--passes=3",
                        "--rounds=2"],
                       cwd=tiny_config.REPO, capture_output=True, text=True,
                       check=True).stdout
  record = json.loads(out.strip().splitlines()[-1])
  assert record["windows"] == 12 and record["tokens"] > 12
  by_multiple = record["by_multiple"]
  for multiple, found in by_multiple.items():
    assert all(width % int(multiple) == 0 for width in found["widths"])
    assert found["mean_width"] >= record["mean_longest_row"]
    assert [len(passes) for passes in found["rounds"]] == [3, 3]
    assert found["search_seconds"] == pytest.approx(
        found["first_pass_seconds"] + (record["search_passes"] - 1) * found["pass_seconds"],
        abs=(record["search_passes"] + 1) * 5e-4)           # each rounded to 1 ms
    assert found["search_speedup"] == pytest.approx(
        by_multiple["16"]["search_seconds"] / found["search_seconds"], rel=0.05)
  assert by_multiple["4"]["mean_width"] < by_multiple["16"]["mean_width"]
  assert record["command"].startswith("python -m benchmarks.dynamic_eval --config=configs/demo.py")


@pytest.mark.parametrize("flag", ["--multiples=4", "--multiples=16,x", "--multiples=16,0",
                                  "--passes=1"])
def test_bad_flags_are_a_one_line_error(flag):
  run = subprocess.run([*COMMAND, flag], cwd=tiny_config.REPO, capture_output=True,
                       text=True, check=False)
  assert run.returncode != 0
  assert run.stderr.strip().splitlines()[-1].startswith(f"error: {flag}")
