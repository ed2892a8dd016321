"""The user's text files: lines end at "\n" only, a byte-order mark is dropped, and bytes
that are not UTF-8, or a NUL byte, are a one-line error naming the byte and its line."""

import pytest

from attnlm_jax.common import errors
from attnlm_jax.common import text_files


def test_only_a_newline_ends_a_line():
  text = "a\x1cb c\x0c d\n\ne\u2028f\x85g\r\nlast"
  assert text_files.split_lines(text) == ["a\x1cb c\x0c d", "", "e\u2028f\x85g", "last"]
  assert text.splitlines() != text_files.split_lines(text)  # What it must not do.
  assert text_files.split_lines("one\n") == ["one"]


def test_a_byte_order_mark_is_not_part_of_the_first_word(tmp_path):
  path = tmp_path / "bom.txt"
  path.write_bytes("\ufeffthe cat\nsat\n".encode("utf-8"))
  assert text_files.read_lines(path) == ["the cat", "sat"]


class CustomError(errors.UserError):
  pass


def test_bytes_that_are_not_utf8_name_the_file_byte_and_line(tmp_path):
  path = tmp_path / "latin1.txt"
  path.write_bytes("ok\ncaf\u00e9\n".encode("latin-1"))
  with pytest.raises(CustomError, match=r"latin1\.txt: byte 0xe9 at offset 6 \(line 2\) is "
                                        r"not UTF-8: re-encode the file as UTF-8$"):
    text_files.read_lines(path, CustomError)


def test_a_nul_byte_is_a_binary_file_named_with_its_line(tmp_path):
  path = tmp_path / "nul.txt"
  path.write_bytes(b"ok\nnot \x00 text\n")       # valid UTF-8, but no text file holds a NUL
  with pytest.raises(CustomError, match=r"nul\.txt: a NUL byte at offset 7 \(line 2\): a binary "
                                        r"file, not text; pass the corpus's text file$"):
    text_files.read_lines(path, CustomError)
