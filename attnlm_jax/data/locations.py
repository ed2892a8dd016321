"""Where the corpora live: the data root, each corpus's directory in it, how to download it;
`absolute`, how a local path given by a user is read, and `as_typed`, how one is printed
(docs/data.md, "Getting the corpora").
"""

from __future__ import annotations

import os
import pathlib
from typing import NamedTuple

from etils import epath

from attnlm_jax.common import logging_utils

ENV_VAR = "ATTNLM_DATA_DIR"


class Corpus(NamedTuple):
  """A downloadable corpus: its name in messages and its directory under the data root."""
  title: str
  subdir: str


CORPORA = {
    "ptb": Corpus("Penn Treebank", "ptb"),
    "wikitext2": Corpus("WikiText-2", "wikitext-2"),
    "conll2000": Corpus("CoNLL-2000", "pos/conll2000"),
    "treebank_sample": Corpus("NLTK's Penn Treebank sample", "pos/treebank_sample/tagged"),
}


def absolute(path: str) -> str:
  """A local path made absolute (`~` expanded); "" and URLs (`gs://...`) as they are."""
  if not path or logging_utils.is_remote(path):
    return path
  return os.path.abspath(os.path.expanduser(path))


def as_typed(path: epath.Path) -> epath.Path:
  """`path` relative to the current directory when it lies inside it (as a user types it
  from the repository root), else as it is: the form the printed commands take."""
  local = pathlib.Path(os.fspath(path))
  if local.is_absolute() and local.is_relative_to(pathlib.Path.cwd()):
    return epath.Path(local.relative_to(pathlib.Path.cwd()))
  return path


def data_root() -> epath.Path:
  """`$ATTNLM_DATA_DIR`, else `$XDG_DATA_HOME/attnlm_jax`, else `~/.local/share/attnlm_jax`."""
  if os.environ.get(ENV_VAR):
    return epath.Path(os.environ[ENV_VAR]).expanduser()
  base = os.environ.get("XDG_DATA_HOME") or os.path.expanduser("~/.local/share")
  return epath.Path(base) / "attnlm_jax"


def corpus_dir(corpus: str) -> epath.Path:
  """The directory of `corpus` (a key of CORPORA) under the data root."""
  return data_root() / CORPORA[corpus].subdir


def download_hint(corpus: str, directory) -> str:
  """'download TITLE with "python -m attnlm_jax.data.download --corpus=NAME"', the command
  that fills `directory`: with `--data_dir=ROOT` when `directory` is the corpus's place under
  a root other than the data root."""
  command = f"python -m attnlm_jax.data.download --corpus={corpus}"
  path, subdir = os.fspath(directory).rstrip("/"), CORPORA[corpus].subdir
  if not logging_utils.is_remote(path) and path.endswith("/" + subdir):
    root = os.path.abspath(path[:-len(subdir) - 1])
    if root != os.path.abspath(data_root()):
      command += f" --data_dir={root}"
  return f'download {CORPORA[corpus].title} with "{command}"'
