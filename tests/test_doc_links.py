"""Every relative link of the documentation reaches its file, and its #anchor a heading there
(GitHub's anchors: the heading lower-cased, punctuation dropped, spaces as hyphens)."""

import re

import pytest

import tiny_config

DOCS = sorted([tiny_config.REPO / "README.md", *tiny_config.REPO.glob("docs/**/*.md"),
               *tiny_config.REPO.glob("benchmarks/**/*.md"),
               *tiny_config.REPO.glob("launch/**/*.md")])
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
CODE_BLOCK = re.compile(r"```.*?```", re.S)


def anchor(heading: str) -> str:
  """GitHub's anchor of a Markdown heading's text."""
  return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(text: str) -> set[str]:
  """The anchors of a page's headings; a repeated heading's gets -1, -2, ..."""
  found, seen = set(), {}
  for heading in re.findall(r"^#+\s+(.*)$", CODE_BLOCK.sub("", text), re.M):
    name = anchor(heading)
    found.add(f"{name}-{seen[name]}" if name in seen else name)
    seen[name] = seen.get(name, 0) + 1
  return found


def test_anchor_of_a_heading_with_code_and_punctuation():
  assert anchor("Why `average` and `conv1x1` start at 0.5") == "why-average-and-conv1x1-start-at-05"
  assert anchors("# A\n## A\n```\n# not a heading\n```\n") == {"a", "a-1"}


@pytest.mark.parametrize("page", DOCS, ids=lambda p: str(p.relative_to(tiny_config.REPO)))
def test_every_relative_link_resolves(page):
  broken = []
  for target in LINK.findall(CODE_BLOCK.sub("", page.read_text())):
    if re.match(r"[a-z]+:", target):   # https:, mailto: ...
      continue
    path, _, fragment = target.partition("#")
    destination = page.parent / path if path else page
    if not destination.exists():
      broken.append(f"{target}: no such file")
    elif fragment and destination.suffix == ".md" and fragment not in anchors(
        destination.read_text()):
      broken.append(f"{target}: no such heading")
  assert not broken, broken
