"""Two taggers on the text the LM shows them: trained on the words as CoNLL-2000 spells them
(`--config.data.lm_data_dir=`, the recipe before 01609f8) and on the words as PTB shows them
(the recipe: words outside PTB's vocabulary read as <unk>).

usage: python compare.py WORDS_TAGGER_DIR LM_TAGGER_DIR CONLL_DIR PTB_DIR > output.json

For each tagger: its accuracy on the CoNLL-2000 test split (section 20, no punctuation) with
every word as spelled, and as PTB shows it (overall and at the words read as <unk>); then, on
PTB's valid split, the tags each gives PTB's own <unk> tokens and how often the two agree.
"""

import collections
import json
import sys

from attnlm_jax.data import corpus as corpus_lib
from attnlm_jax.data import vocab as vocab_lib
from attnlm_jax.tagger import corpora
from attnlm_jax.tagger import model
from attnlm_jax.tagger import tagging


def main(words_dir, lm_dir, conll_dir, ptb_dir):
  test = corpora.read_conll(f"{conll_dir}/test.txt")
  known = corpora.lm_words(ptb_dir)
  shown = corpora.as_lm_text(test, known)
  valid = corpus_lib.read_split("ptb", ptb_dir, "valid").sentences
  result = {"test_tokens": sum(len(w) for w, _ in test),
            "test_tokens_read_as_unk": sum(w == vocab_lib.UNK for s, _ in shown for w in s),
            "ptb_valid_tokens": sum(map(len, valid)),
            "ptb_valid_unk": sum(w == vocab_lib.UNK for s in valid for w in s), "taggers": {}}
  tags = {}
  for name, directory in (("words_as_spelled", words_dir), ("words_as_ptb_shows", lm_dir)):
    tagger = tagging.load(directory)
    tags[name] = model.tag(tagger, valid)
    at_unk = collections.Counter(t for s, ts in zip(valid, tags[name])
                                 for w, t in zip(s, ts) if w == vocab_lib.UNK)
    result["taggers"][name] = {
        "directory": str(directory),
        "conll_test_accuracy_as_spelled": model.accuracy(tagger, test),
        "conll_test_accuracy_as_ptb_shows": model.accuracy(tagger, shown),
        "conll_test_accuracy_at_unk": model.accuracy(tagger, shown, only=vocab_lib.UNK),
        "ptb_valid_unk_tags": dict(at_unk.most_common(8))}
  pairs = [(a, b, w) for s, x, y in zip(valid, *tags.values()) for a, b, w in zip(x, y, s)]
  result["ptb_valid_agreement"] = sum(a == b for a, b, _ in pairs) / len(pairs)
  at_unk = [(a, b) for a, b, w in pairs if w == vocab_lib.UNK]
  result["ptb_valid_agreement_at_unk"] = sum(a == b for a, b in at_unk) / len(at_unk)
  print(json.dumps(result, indent=1))


if __name__ == "__main__":
  main(*sys.argv[1:])
