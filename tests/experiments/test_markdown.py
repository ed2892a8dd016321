"""The pages' prose helpers."""

from attnlm_jax.experiments import markdown


def test_a_listing_reads_as_prose():
  assert markdown.listing(["`a`"]) == "`a`"
  assert markdown.listing(["`a`", "`b`"]) == "`a` and `b`"
  assert markdown.listing(["`a`", "`b`", "`c`"]) == "`a`, `b` and `c`"
