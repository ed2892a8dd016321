"""A trained tagger's files, and the tags of an LM corpus: `tag_corpus` tags a split once and
caches the tags in `<tagger workdir>/tags/<corpus>.<split>.txt` (beside the tagger that made
them: the corpora directory is read-only), one line per sentence, one tag per word."""

import functools
import hashlib
import json
from typing import Callable, Optional, Sequence

from absl import logging
from etils import epath
import flax.serialization
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from attnlm_jax.common import json_io
from attnlm_jax.data import vocab as vocab_lib
from attnlm_jax.tagger import corpora
from attnlm_jax.tagger import model as model_lib

PARAMS_FILE = "tagger.msgpack"  # The tagger's parameters.
META_FILE = "tagger.json"       # Its config, vocabularies, tag list and metrics.
# The fix of a tagger's files that cannot be used.
_DAMAGED_FIX = ("train it again into a new --workdir (--mode=train_tagger "
                "--config=configs/tagger.py)")


def save(tagger: model_lib.Tagger, workdir, metrics: dict) -> None:
  """Writes `tagger.msgpack` (parameters) and `tagger.json` (config, vocabularies, metrics),
  and deletes the corpus tags cached by a previous tagger in `workdir`."""
  workdir = epath.Path(workdir)
  workdir.mkdir(parents=True, exist_ok=True)
  if (workdir / "tags").exists():
    (workdir / "tags").rmtree()
  (workdir / PARAMS_FILE).write_bytes(
      flax.serialization.msgpack_serialize(jax.tree.map(np.asarray, tagger.params)))
  (workdir / META_FILE).write_text(json.dumps(
      {"config": tagger.config.to_dict(), "words": tagger.words.words,
       "suffixes": tagger.suffixes.words, "tags": list(tagger.tags), "metrics": metrics},
      indent=1))


def read_meta(workdir: epath.Path) -> dict:
  """The `tagger.json` of `workdir` (a finished tagger's results, kept without its parameters
  in docs/results); corpora.TaggerError when it cannot be read."""
  return json_io.read_json(workdir / META_FILE, corpora.TaggerError, _DAMAGED_FIX)


def _loadable_meta(workdir: epath.Path) -> dict:
  """`read_meta` of a tagger that can be loaded; corpora.TaggerError when there is none, or
  when its parameters file is missing."""
  if not (workdir / META_FILE).exists():
    raise corpora.TaggerError(f"no tagger in {workdir}: train one with --mode=train_tagger "
                              f"--config=configs/tagger.py --workdir={workdir}")
  if not (workdir / PARAMS_FILE).exists():
    raise corpora.TaggerError(f"the tagger in {workdir} has no {PARAMS_FILE}: {_DAMAGED_FIX}")
  return read_meta(workdir)


def num_tags(data_config: ml_collections.ConfigDict) -> int:
  """The size of the tag list of the tagger in `data_config.tagger_dir` (what a POS-input LM's
  `model.num_tags` is); corpora.TaggerError without one."""
  if not data_config.get("tagger_dir"):
    raise corpora.TaggerError("config.model.pos_tags needs a tagger: train one with "
                              "--mode=train_tagger --config=configs/tagger.py "
                              "--workdir=TAGGER_DIR and pass --config.data.tagger_dir=TAGGER_DIR")
  return len(_loadable_meta(epath.Path(data_config.tagger_dir))["tags"])


def fingerprint(workdir) -> str:
  """A short hash of the tagger saved in `workdir` (parameters, vocabularies, tag list): a
  tagger trained again, or another one, tags a corpus otherwise and has another."""
  workdir = epath.Path(workdir)
  meta = _loadable_meta(workdir)
  digest = hashlib.sha256((workdir / PARAMS_FILE).read_bytes())
  digest.update(json.dumps({key: meta[key] for key in ("config", "words", "suffixes", "tags")},
                           sort_keys=True).encode())
  return digest.hexdigest()[:16]


def load(workdir) -> model_lib.Tagger:
  """The tagger saved in `workdir` by `train_tagger`."""
  workdir = epath.Path(workdir)
  meta = _loadable_meta(workdir)
  params = flax.serialization.msgpack_restore((workdir / PARAMS_FILE).read_bytes())
  return model_lib.Tagger(jax.tree.map(jnp.asarray, params),
                          ml_collections.ConfigDict(meta["config"]),
                          vocab_lib.Vocabulary(meta["words"]),
                          vocab_lib.Vocabulary(meta["suffixes"]), tuple(meta["tags"]))


def cache_path(tagger_dir, corpus: str, split: str) -> epath.Path:
  """Where `tag_corpus` caches a split's tags: `<tagger_dir>/tags/<corpus>.<split>.txt`."""
  return epath.Path(tagger_dir) / "tags" / f"{corpus}.{split}.txt"


def tag_corpus(tagger_dir, corpus: str, split: str,
               sentences: Sequence[Sequence[str]]) -> list[np.ndarray]:
  """LM tag inputs for the sentences of one split, tagged once and cached (`cache_path`).

  Returns per sentence the tag ids of its words followed by the <eos> tag, aligned with
  `LMData.sentences(split)` (encoded words + EOS), so a batch's tag rows are built exactly as
  its token rows: `batching.make_batch(np.concatenate(tags), starts, lengths, width)["inputs"]`
  is the batch's `tags` (tag ids 0 and 1 are <pad> and <eos>, as PAD_ID and EOS_ID). The
  cache is reused while it holds one tag per word of every sentence of the split.
  """
  path = cache_path(tagger_dir, corpus, split)
  tagger = load(tagger_dir)
  index = {t: i for i, t in enumerate(tagger.tags)}
  lines = path.read_text().splitlines() if path.exists() else []
  if len(lines) != len(sentences) or any(len(line.split()) != len(sentence)
                                         for line, sentence in zip(lines, sentences)):
    logging.info("tagging the %d sentences of %s %s with the tagger in %s (once: cached in "
                 "%s)", len(sentences), corpus, split, tagger_dir, path)
    lines = [" ".join(tagger.tags[i] for i in ids) for ids in model_lib.tag_ids(tagger, sentences)]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines))
  eos_tag = index[vocab_lib.EOS]
  return [np.array([index[t] for t in line.split()] + [eos_tag], np.int32) for line in lines]


def corpus_tags(config: ml_collections.ConfigDict
                ) -> Optional[Callable[[str, Sequence[Sequence[str]]], list[np.ndarray]]]:
  """What an LM's data reads its tags with (`data.load`'s `tag_source`): `tag_corpus` of the
  tagger in `config.data.tagger_dir` for `config.data.corpus`, or None for a model that reads
  no tags (`config.model.pos_tags` off) or without a tagger."""
  if not (config.model.get("pos_tags") and config.data.get("tagger_dir")):
    return None
  return functools.partial(tag_corpus, config.data.tagger_dir, config.data.corpus)
