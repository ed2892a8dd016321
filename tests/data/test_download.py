"""attnlm_jax.data.download against archives built from ../shared/data, served on loopback."""

import functools
import hashlib
import http.server
import io
import json
import os
import pathlib
import runpy
import socket
import subprocess
import sys
import tarfile
import threading
import urllib.parse
import zipfile

import pytest

from attnlm_jax.data import corpus
from attnlm_jax.data import download
from attnlm_jax.data import locations
import tiny_config

PTB_FILES = ["ptb.train.txt", "ptb.valid.txt", "ptb.test.txt"]
WIKI_FILES = ["wiki.train.tokens", "wiki.valid.tokens", "wiki.test.tokens"]


def _mirror_path(url: str) -> str:
  """The path of `url` on a mirror: /host/path."""
  parts = urllib.parse.urlsplit(url)
  return f"/{parts.netloc}{parts.path}"


class _Handler(http.server.SimpleHTTPRequestHandler):
  """Serves files and records the path of every request."""

  def do_GET(self):
    self.server.requests.append(urllib.parse.unquote(self.path))
    super().do_GET()

  def log_message(self, *args):
    del args


class Server:
  """A loopback HTTP server over `root`, laid out as the mirror's `host/path`."""

  def __init__(self, root: pathlib.Path):
    self.root = root
    self._httpd = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(_Handler, directory=str(root)))
    self._httpd.requests = self.requests = []
    self.mirror = f"http://127.0.0.1:{self._httpd.server_address[1]}"
    threading.Thread(target=self._httpd.serve_forever, daemon=True).start()

  def publish(self, url: str, data: bytes) -> str:
    """Serves `data` as the mirror copy of `url`; returns the path the downloader asks for."""
    path = self.root / _mirror_path(url).lstrip("/")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return _mirror_path(url)

  def close(self):
    self._httpd.shutdown()
    self._httpd.server_close()


@pytest.fixture(name="server")
def fixture_server(tmp_path):
  server = Server(tmp_path / "www")
  server.root.mkdir()
  yield server
  server.close()


def _tgz(members: dict[str, bytes]) -> bytes:
  buffer = io.BytesIO()
  with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=1) as bundle:
    for name, data in members.items():
      info = tarfile.TarInfo(name)
      info.size = len(data)
      bundle.addfile(info, io.BytesIO(data))
  return buffer.getvalue()


def _zip(members: dict[str, bytes]) -> bytes:
  buffer = io.BytesIO()
  with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as bundle:
    for name, data in members.items():
      bundle.writestr(name, data)
  return buffer.getvalue()


def _ptb_archive(shared_data, flip: str = "") -> bytes:
  """simple-examples.tgz as published (the PTB files plus others), one byte of `flip` changed."""
  members = {"./simple-examples/README": b"RNNLM toolkit examples\n"}
  for name in PTB_FILES:
    data = bytearray((shared_data / "ptb" / name).read_bytes())
    if name == flip:
      data[1000] ^= 1
    members[f"./simple-examples/data/{name}"] = bytes(data)
  return _tgz(members)


def _listing(directory: pathlib.Path) -> list[str]:
  return sorted(str(p.relative_to(directory)) for p in directory.rglob("*"))


def _same_files(directory: pathlib.Path, source: pathlib.Path, names) -> bool:
  return all((directory / name).read_bytes() == (source / name).read_bytes() for name in names)


def test_ptb_archive_is_verified_placed_and_not_fetched_again(shared_data, server, tmp_path,
                                                              capsys):
  data = tmp_path / "data"
  archive = server.publish(download.SPECS["ptb"].sources[0].url, _ptb_archive(shared_data))
  result = download.download("ptb", data, server.mirror)
  assert result == {"corpus": "ptb", "directory": str(data / "ptb"), "files": PTB_FILES,
                    "downloaded": True}
  assert server.requests == [archive]
  assert _listing(data) == sorted(["ptb", *(f"ptb/{n}" for n in PTB_FILES)])  # No leftovers.
  assert _same_files(data / "ptb", shared_data / "ptb", PTB_FILES)
  assert len(corpus.read_split("ptb", result["directory"], "train").sentences) == 42_068

  capsys.readouterr()
  again = download.download("ptb", data, server.mirror)
  assert again == {**result, "downloaded": False}
  assert server.requests == [archive]
  assert "nothing downloaded" in capsys.readouterr().err


@pytest.mark.parametrize("served", ["second_archive", "plain_files"])
def test_wikitext2_sources_are_tried_in_order(shared_data, server, tmp_path, served):
  data = tmp_path / "data"
  # Before: the error names the command that fills this directory.
  (data / "wikitext-2").mkdir(parents=True)
  with pytest.raises(corpus.CorpusError) as e:
    corpus.read_split("wikitext2", data / "wikitext-2", "valid")
  assert f'--corpus=wikitext2 --data_dir={data}" or pass' in str(e.value)

  first, second, files = download.SPECS["wikitext2"].sources
  texts = {name: (shared_data / "wikitext-2" / name).read_bytes() for name in WIKI_FILES}
  if served == "second_archive":
    server.publish(second.url, _zip({f"wikitext-2/{n}": t for n, t in texts.items()}))
    urls = [first.url, second.url]
  else:  # pytorch/examples' train.txt, valid.txt, test.txt, renamed.
    for name, url in files.urls.items():
      server.publish(url, texts[name])
    urls = [first.url, second.url, *files.urls.values()]
  download.download("wikitext2", data, server.mirror)
  assert server.requests == [_mirror_path(url) for url in urls]
  assert _listing(data) == sorted(["wikitext-2", *(f"wikitext-2/{n}" for n in WIKI_FILES)])
  assert _same_files(data / "wikitext-2", shared_data / "wikitext-2", WIKI_FILES)
  assert len(corpus.read_split("wikitext2", data / "wikitext-2", "valid").sentences) == 8_753


@pytest.mark.parametrize("name, source_dir, prefix, count", [
    ("conll2000", "pos/conll2000", "conll2000", 2),
    ("treebank_sample", "pos/treebank_sample/tagged", "treebank/tagged", 199),
])
def test_nltk_corpora_from_a_file_mirror(shared_data, tmp_path, name, source_dir, prefix,
                                         count):
  source = shared_data / source_dir
  files = download.SPECS[name].files
  assert len(files) == count
  members = {f"{prefix}/{file}": (source / file).read_bytes() for file in files}
  url = urllib.parse.urlsplit(download.SPECS[name].sources[0].url)
  published = tmp_path / "copy" / url.netloc / url.path.lstrip("/")
  published.parent.mkdir(parents=True)
  published.write_bytes(_zip({**members, f"{prefix}/README": b"readme\n"}))
  result = download.download(name, tmp_path / "data", f"file://{tmp_path / 'copy'}")
  directory = pathlib.Path(result["directory"])
  assert directory == tmp_path / "data" / locations.CORPORA[name].subdir
  assert sorted(p.name for p in directory.iterdir()) == sorted(files)
  assert _same_files(directory, source, files)


def test_cli_downloads_and_prints_json(shared_data, server, tmp_path):
  server.publish(download.SPECS["ptb"].sources[0].url, _ptb_archive(shared_data))
  result = subprocess.run(
      [sys.executable, "-m", "attnlm_jax.data.download", "--corpus=ptb",
       f"--data_dir={tmp_path / 'data'}", f"--mirror={server.mirror}"],
      capture_output=True, text=True, cwd=tiny_config.REPO, check=False)
  assert result.returncode == 0, result.stderr
  assert json.loads(result.stdout.splitlines()[-1]) == {
      "corpus": "ptb", "directory": str(tmp_path / "data" / "ptb"), "files": PTB_FILES,
      "downloaded": True}
  assert _same_files(tmp_path / "data" / "ptb", shared_data / "ptb", PTB_FILES)


def test_cli_refuses_a_mismatching_archive_and_leaves_nothing(shared_data, server, tmp_path):
  server.publish(download.SPECS["ptb"].sources[0].url,
                 _ptb_archive(shared_data, flip="ptb.valid.txt"))
  data = tmp_path / "data"
  result = subprocess.run(
      [sys.executable, "-m", "attnlm_jax.data.download", "--corpus=ptb", f"--data_dir={data}",
       f"--mirror={server.mirror}"], capture_output=True, text=True, cwd=tiny_config.REPO,
      check=False)
  assert result.returncode == 1
  assert result.stdout == ""
  assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: "), result.stderr
  flipped = bytearray((shared_data / "ptb" / "ptb.valid.txt").read_bytes())
  flipped[1000] ^= 1
  assert (f"ptb.valid.txt has SHA-256 {hashlib.sha256(flipped).hexdigest()}, expected "
          f"{download.SPECS['ptb'].checksums[('ptb.valid.txt',)]}") in result.stderr
  # The later source (plain files) was tried too, then the manual route is named.
  assert "ptb.train.txt: HTTP 404" in result.stderr
  assert result.stderr.rstrip().endswith(
      f"copy ptb.train.txt, ptb.valid.txt, ptb.test.txt into {data / 'ptb'} by hand "
      "(docs/data.md lists their SHA-256)")
  assert _listing(data) == []


@pytest.mark.parametrize("name", ["ptb", "conll2000"])
def test_truncated_archive_is_refused(shared_data, server, tmp_path, name):
  if name == "ptb":
    archive = _ptb_archive(shared_data)
  else:
    archive = _zip({f"conll2000/{f}": (shared_data / "pos/conll2000" / f).read_bytes()
                    for f in ("train.txt", "test.txt")})
  server.publish(download.SPECS[name].sources[0].url, archive[:len(archive) // 2])
  with pytest.raises(download.DownloadError, match="not a valid archive") as e:
    download.download(name, tmp_path / "data", server.mirror)
  assert "\n" not in str(e.value)
  assert _listing(tmp_path / "data") == []


def test_unreachable_server_is_one_line_naming_the_url(tmp_path):
  with socket.socket() as s:  # A port nobody listens on.
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
  with pytest.raises(download.DownloadError) as e:
    download.download("conll2000", tmp_path / "data", f"http://127.0.0.1:{port}")
  message = str(e.value)
  assert "\n" not in message
  assert message.startswith(
      f"could not download CoNLL-2000: http://127.0.0.1:{port}/raw.githubusercontent.com/"
      "nltk/nltk_data/gh-pages/packages/corpora/conll2000.zip: ")
  assert "refused" in message.lower()
  assert message.endswith(f"copy train.txt, test.txt into {tmp_path}/data/pos/conll2000 by hand "
                          "(docs/data.md lists their SHA-256)")
  assert _listing(tmp_path / "data") == []


def test_other_files_in_place_are_refused_and_kept(server, tmp_path):
  directory = tmp_path / "data" / "ptb"
  directory.mkdir(parents=True)
  (directory / "ptb.train.txt").write_text(" my own corpus \n")
  with pytest.raises(download.DownloadError, match=r"already holds Penn Treebank files that "
                     r"fail the check \(ptb\.train\.txt has SHA-256 .*remove them and rerun"):
    download.download("ptb", tmp_path / "data", server.mirror)
  assert (directory / "ptb.train.txt").read_text() == " my own corpus \n"
  assert server.requests == []


def test_a_mirror_without_a_scheme_and_a_data_root_that_is_a_file_are_one_line(tmp_path):
  with pytest.raises(download.DownloadError, match=rf"--mirror=copies is not a URL: use "
                     rf"file://{os.getcwd()}/copies for a local copy"):
    download.download("ptb", tmp_path, mirror="copies")
  (tmp_path / "file").write_text("")
  with pytest.raises(download.DownloadError, match=r"data directory .*/file is a file"):
    download.download("ptb", tmp_path / "file")
  assert (tmp_path / "file").read_text() == ""


def test_mirror_url_keeps_host_and_path():
  url = "https://s3.amazonaws.com/research.metamind.io/wikitext/wikitext-2-v1.zip"
  assert download.mirror_url(url, "") == url
  assert download.mirror_url(url, "file:///srv/copy/") == (
      "file:///srv/copy/s3.amazonaws.com/research.metamind.io/wikitext/wikitext-2-v1.zip")


def test_data_root_follows_the_environment(monkeypatch, tmp_path):
  monkeypatch.setenv("ATTNLM_DATA_DIR", str(tmp_path / "corpora"))
  monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
  assert locations.data_root() == tmp_path / "corpora"
  configs = {name: runpy.run_path(str(tiny_config.REPO / "configs" / name))["get_config"]()
             for name in ("ptb.py", "wikitext2.py", "tagger.py")}
  assert configs["ptb.py"].data.data_dir == str(tmp_path / "corpora" / "ptb")
  assert configs["wikitext2.py"].data.data_dir == str(tmp_path / "corpora" / "wikitext-2")
  assert configs["tagger.py"].data.data_dir == str(tmp_path / "corpora/pos/conll2000")
  assert configs["tagger.py"].data.treebank_dir == str(
      tmp_path / "corpora/pos/treebank_sample/tagged")
  monkeypatch.delenv("ATTNLM_DATA_DIR")
  assert locations.data_root() == tmp_path / "xdg" / "attnlm_jax"
  monkeypatch.delenv("XDG_DATA_HOME")
  monkeypatch.setenv("HOME", str(tmp_path / "home"))
  assert locations.data_root() == tmp_path / "home" / ".local" / "share" / "attnlm_jax"


def test_missing_corpus_error_names_the_download_command(monkeypatch, tmp_path):
  monkeypatch.setenv("ATTNLM_DATA_DIR", str(tmp_path))
  with pytest.raises(corpus.CorpusError) as e:
    corpus.read_split("ptb", locations.corpus_dir("ptb"), "train")
  assert str(e.value) == (
      f'data directory {tmp_path}/ptb does not exist: download Penn Treebank with '
      '"python -m attnlm_jax.data.download --corpus=ptb" or pass --config.data.data_dir=DIR, '
      'the directory holding ptb.{train,valid,test}.txt')
  os.makedirs(tmp_path / "ptb")
  with pytest.raises(corpus.CorpusError, match=r"ptb/ptb\.train\.txt not found: download Penn "
                     r'Treebank with "python -m attnlm_jax\.data\.download --corpus=ptb" or'):
    corpus.read_split("ptb", locations.corpus_dir("ptb"), "train")
