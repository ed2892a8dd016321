"""The lines of a text file the user gives: UTF-8, one line per "\\n".

Only "\\n" ends a line, and a "\\r" just before it is dropped (Windows line ends). Python's
`str.splitlines` would also split at "\\v", "\\f", "\\x1c" to "\\x1e", "\\x85", U+2028 and
U+2029, which can stand inside a sentence of a real corpus, so that one line of the file
would become two sentences. A UTF-8 byte-order mark at the start is dropped, not read as part
of the first word. Bytes that are not UTF-8, and a NUL byte (valid UTF-8, but no text file
holds one), are an error that names the file, the byte and its line. `gunzip` unpacks a
gzipped file first, with the same kind of one-line error.
"""

import gzip
from typing import Type
import zlib

from etils import epath

from attnlm_jax.common import errors


def decode(name: str, data: bytes, error: Type[errors.UserError] = errors.UserError) -> str:
  """`data` decoded as UTF-8 without a leading byte-order mark; `error` names the first byte
  that is not UTF-8, or the first NUL byte (`name`: the file, for the message)."""
  try:
    text = data.decode("utf-8-sig")
  except UnicodeDecodeError as e:
    line = data.count(b"\n", 0, e.start) + 1
    raise error(f"{name}: byte 0x{data[e.start]:02x} at offset {e.start} (line {line}) is "
                "not UTF-8: re-encode the file as UTF-8") from None
  nul = data.find(b"\0")
  if nul >= 0:
    line = data.count(b"\n", 0, nul) + 1
    raise error(f"{name}: a NUL byte at offset {nul} (line {line}): a binary file, not text; "
                "pass the corpus's text file")
  return text


def gunzip(name: str, data: bytes, error: Type[errors.UserError], problem: str,
           fix: str) -> bytes:
  """`data` decompressed; `error` says "NAME PROBLEM (why): FIX" when it is not whole gzip."""
  try:
    return gzip.decompress(data)
  except (OSError, EOFError, zlib.error) as e:
    raise error(f"{name} {problem} ({e}): {fix}") from None


def split_lines(text: str) -> list[str]:
  """The lines of `text` without their ends ("\\n", or "\\r\\n"); a final empty line, after
  the file's last line end, is dropped."""
  lines = text.split("\n")
  if lines[-1] == "":
    lines.pop()
  return [line[:-1] if line.endswith("\r") else line for line in lines]


def read_lines(path: epath.Path,
               error: Type[errors.UserError] = errors.UserError) -> list[str]:
  """`split_lines` of the file at `path`, decoded by `decode` (errors raised as `error`)."""
  return split_lines(decode(str(path), path.read_bytes(), error))
