"""A small probabilistic English-like grammar: the embedded default corpus and its probe set.

Its sentences put nouns of the other number ("attractors") between a subject's head noun and
its verb. `python -m attnlm_jax.data.grammar --out_dir=attnlm_jax/data/embedded` writes
`{train,valid,test}.txt.gz` and the probe items `agreement.jsonl.gz` (docs/analysis.md, "The
agreement probe"), a pure function of the seed.
"""

import dataclasses
import gzip
import json
import pathlib
import random
import sys
from typing import Sequence

from absl import app
from absl import flags

from attnlm_jax.common import errors
from attnlm_jax.data import corpus

SG, PL = 0, 1
SPLIT_SIZES = {"train": 20_000, "valid": 2_000, "test": 2_000}
PROBE_SIZE = 1_000
MAX_WORDS = 35
MAX_PROBE_DISTANCE = 12
CONSTRUCTIONS = ("simple", "pp", "src", "orc")


class GrammarError(errors.UserError, ValueError):
  """A word sequence the grammar cannot analyse, or an unwritable output directory."""


# ----------------------------------------------------------------------------- lexicon
# Nouns as (singular, plural); "a" = animate (can act), "i" = inanimate.
_ANIMATE_NOUNS = (
    ("dog", "dogs"), ("cat", "cats"), ("teacher", "teachers"), ("student", "students"),
    ("doctor", "doctors"), ("farmer", "farmers"), ("child", "children"), ("woman", "women"),
    ("man", "men"), ("girl", "girls"), ("boy", "boys"), ("friend", "friends"),
    ("neighbor", "neighbors"), ("author", "authors"), ("pilot", "pilots"),
    ("singer", "singers"), ("baker", "bakers"), ("king", "kings"), ("queen", "queens"),
    ("lawyer", "lawyers"), ("nurse", "nurses"), ("soldier", "soldiers"), ("mouse", "mice"),
    ("horse", "horses"), ("bird", "birds"), ("wolf", "wolves"), ("fox", "foxes"),
    ("painter", "painters"), ("manager", "managers"), ("guard", "guards"),
    ("officer", "officers"), ("senator", "senators"), ("player", "players"),
    ("rabbit", "rabbits"), ("lion", "lions"),
)
_THING_NOUNS = (
    ("key", "keys"), ("cabinet", "cabinets"), ("table", "tables"), ("book", "books"),
    ("letter", "letters"), ("house", "houses"), ("garden", "gardens"), ("car", "cars"),
    ("box", "boxes"), ("window", "windows"), ("door", "doors"), ("picture", "pictures"),
    ("river", "rivers"), ("bridge", "bridges"), ("tree", "trees"), ("road", "roads"),
    ("city", "cities"), ("village", "villages"), ("school", "schools"),
    ("office", "offices"), ("song", "songs"), ("story", "stories"), ("machine", "machines"),
    ("bottle", "bottles"), ("chair", "chairs"), ("room", "rooms"), ("hill", "hills"),
    ("forest", "forests"), ("lamp", "lamps"), ("wall", "walls"), ("report", "reports"),
    ("map", "maps"), ("ship", "ships"), ("field", "fields"), ("shop", "shops"),
)
# Verbs as (3rd person singular present, plural present, past).
_INTRANSITIVE = (  # animate subjects
    ("sleeps", "sleep", "slept"), ("runs", "run", "ran"), ("laughs", "laugh", "laughed"),
    ("smiles", "smile", "smiled"), ("waits", "wait", "waited"), ("sings", "sing", "sang"),
    ("works", "work", "worked"), ("swims", "swim", "swam"), ("arrives", "arrive", "arrived"),
    ("leaves", "leave", "left"), ("listens", "listen", "listened"),
    ("dances", "dance", "danced"),
)
_STATIVE = (  # any subject
    ("stands", "stand", "stood"), ("falls", "fall", "fell"), ("remains", "remain", "remained"),
    ("moves", "move", "moved"), ("stays", "stay", "stayed"), ("shakes", "shake", "shook"),
)
# Transitive verbs with the animacy their object must have ("a", "i", or "x" = any).
_TRANSITIVE = (
    (("sees", "see", "saw"), "x"), (("likes", "like", "liked"), "x"),
    (("finds", "find", "found"), "x"), (("remembers", "remember", "remembered"), "x"),
    (("watches", "watch", "watched"), "x"), (("loves", "love", "loved"), "x"),
    (("hates", "hate", "hated"), "x"), (("knows", "know", "knew"), "a"),
    (("helps", "help", "helped"), "a"), (("meets", "meet", "met"), "a"),
    (("follows", "follow", "followed"), "a"), (("admires", "admire", "admired"), "a"),
    (("chases", "chase", "chased"), "a"), (("visits", "visit", "visited"), "x"),
    (("builds", "build", "built"), "i"), (("opens", "open", "opened"), "i"),
    (("carries", "carry", "carried"), "i"), (("buys", "buy", "bought"), "i"),
    (("paints", "paint", "painted"), "i"), (("fixes", "fix", "fixed"), "i"),
    (("writes", "write", "wrote"), "i"), (("sells", "sell", "sold"), "i"),
)
_BE = ("is", "are", "was", "were")
_HAVE = ("has", "have", "had")
_ADJECTIVES = {
    "a": ("happy", "sad", "clever", "brave", "angry", "kind", "tired", "hungry", "friendly",
          "proud", "lazy", "young", "gentle", "busy"),
    "i": ("red", "blue", "green", "empty", "broken", "wooden", "narrow", "wide", "heavy",
          "new", "dark", "bright"),
    "x": ("old", "big", "small", "tall", "quiet", "loud", "strange", "famous", "beautiful",
          "cold", "warm", "poor"),
}
_PRE_ADVERBS = ("often", "never", "always", "sometimes", "rarely", "usually", "also", "still")
_POST_ADVERBS = ("quickly", "slowly", "quietly", "happily", "carefully", "again", "today",
                 "here", "there", "together", "early", "late")
_PREPOSITIONS = ("near", "behind", "beside", "with", "on", "under", "in", "from", "by",
                 "above", "of", "across", "to")
_DETERMINERS = {
    SG: ("the", "a", "this", "that", "every", "each", "my", "his", "her", "our", "their"),
    PL: ("the", "these", "those", "some", "many", "two", "three", "several", "my", "his",
         "her", "our", "their"),
}
_CONJUNCTIONS = (("and",), (",", "and"), ("but",), (",", "but"), ("because",), ("while",))
_PRONOUNS = {("a", SG): ("he", "she"), ("i", SG): ("it",), ("a", PL): ("they",),
             ("i", PL): ("they",)}

NOUN_NUMBER: dict[str, int] = {
    form: number for pair in _ANIMATE_NOUNS + _THING_NOUNS for number, form in enumerate(pair)}


def _verb_table() -> dict[str, tuple[str, int | None, str | None]]:
  """word -> (verb class, number or None for a past form, form of the other number)."""
  table = {}
  for cls, verbs in (("intr", _INTRANSITIVE), ("stat", _STATIVE),
                     ("trans", tuple(v for v, _ in _TRANSITIVE)),
                     ("be", (_BE[:2] + (None,), _BE[2:] + (None,))), ("have", (_HAVE,))):
    for sg, pl, past in verbs:
      table[sg] = (cls, SG, pl)
      table[pl] = (cls, PL, sg)
      if past is not None:
        table[past] = (cls, None, None)
  return table


_VERBS = _verb_table()


def other_number(verb: str) -> str:
  """The same verb in the other number ("is" -> "are", "chase" -> "chases")."""
  if verb not in _VERBS or _VERBS[verb][1] is None:
    raise GrammarError(f"'{verb}' is not a verb form that agrees in number; use a present "
                       "tense verb or was/were")
  return _VERBS[verb][2]


def verb_number(verb: str) -> int | None:
  """SG or PL for a verb form that agrees in number, None for a past form or a non-verb."""
  return _VERBS[verb][1] if verb in _VERBS else None


_ALL_ADJECTIVES = frozenset(w for a in _ADJECTIVES.values() for w in a)
# Every word the grammar can write: the corpus's types are drawn from these alone.
VOCABULARY = frozenset(
    set(NOUN_NUMBER) | set(_VERBS) | set(_PRE_ADVERBS) | set(_POST_ADVERBS) | _ALL_ADJECTIVES
    | set(_PREPOSITIONS) | {w for d in _DETERMINERS.values() for w in d}
    | {w for c in _CONJUNCTIONS for w in c} | {w for p in _PRONOUNS.values() for w in p}
    | {"an", "very", "that", "who", "which"})


# ----------------------------------------------------------------------------- generation
@dataclasses.dataclass(frozen=True)
class Sentence:
  """A generated sentence and the agreement dependency of its first clause."""
  words: tuple[str, ...]
  head: int           # index of the first clause's subject head noun
  verb: int           # index of the first clause's main verb
  construction: str   # what stands between head and verb: one of CONSTRUCTIONS


class _Sampler:
  """Draws from the grammar with `random.Random.random()` only (stable across Pythons)."""

  def __init__(self, seed: int):
    self._rng = random.Random(seed)

  def coin(self, p: float) -> bool:
    return self._rng.random() < p

  def pick(self, items: Sequence):
    return items[int(self._rng.random() * len(items))]

  def weighted(self, weights: dict):
    x, total = self._rng.random() * sum(weights.values()), 0.0
    for key, w in weights.items():
      total += w
      if x < total:
        return key
    return key

  def number(self) -> int:
    return PL if self.coin(0.5) else SG

  def animacy(self, p_animate: float = 0.6) -> str:
    return "a" if self.coin(p_animate) else "i"

  def noun_phrase(self, words: list, number: int, animacy: str, pp_prob: float,
                  depth: int = 0) -> int:
    """Appends `det adj* noun (prep NP)*` to words; returns the head noun's index."""
    det = "the" if self.coin(0.5) else self.pick(_DETERMINERS[number])
    adjectives = []
    if self.coin(0.3):
      adjectives.append(self.pick(_ADJECTIVES[animacy] + _ADJECTIVES["x"]))
      if self.coin(0.15):
        adjectives.append(self.pick(_ADJECTIVES["x"]))
    nouns = _ANIMATE_NOUNS if animacy == "a" else _THING_NOUNS
    noun = self.pick(nouns)[number]
    if det == "a" and (adjectives or [noun])[0][0] in "aeiou":
      det = "an"
    words.extend([det, *adjectives, noun])
    head = len(words) - 1
    if depth < 3 and self.coin(pp_prob):
      self.prepositional_phrase(words, pp_prob * 0.6, depth + 1)
    return head

  def prepositional_phrase(self, words: list, pp_prob: float, depth: int = 0) -> None:
    words.append(self.pick(_PREPOSITIONS))
    self.noun_phrase(words, self.number(), self.animacy(0.4), pp_prob, depth)

  def verb(self, forms: tuple[str, str, str], number: int, past: bool) -> str:
    return forms[2] if past else forms[number]

  def transitive(self, object_animacy: str | None = None) -> tuple[tuple[str, str, str], str]:
    """A transitive verb (and its object's animacy) whose object may have object_animacy."""
    while True:
      forms, takes = self.pick(_TRANSITIVE)
      if object_animacy is None:
        return forms, self.animacy() if takes == "x" else takes
      if takes in ("x", object_animacy):
        return forms, object_animacy

  def verb_phrase(self, words: list, number: int, animacy: str, past: bool,
                  coordinate: bool) -> int:
    """Appends a verb phrase agreeing with a subject; returns the verb's index."""
    kinds = ({"intr": 3, "trans": 5, "be_adj": 2, "be_pp": 1, "have": 1} if animacy == "a"
             else {"stat": 3, "be_adj": 3, "be_pp": 2, "have": 1})
    kind = self.weighted(kinds)
    index = len(words)
    if kind == "intr":
      words.append(self.verb(self.pick(_INTRANSITIVE), number, past))
    elif kind == "stat":
      words.append(self.verb(self.pick(_STATIVE), number, past))
    elif kind == "trans":
      forms, object_animacy = self.transitive()
      words.append(self.verb(forms, number, past))
      self.noun_phrase(words, self.number(), object_animacy, 0.25)
    elif kind == "have":
      words.append(self.verb(_HAVE, number, past))
      self.noun_phrase(words, self.number(), "i", 0.25)
    else:
      words.append(_BE[number + (2 if past else 0)])
      if kind == "be_adj":
        if self.coin(0.2):
          words.append("very")
        words.append(self.pick(_ADJECTIVES[animacy] + _ADJECTIVES["x"]))
      else:
        self.prepositional_phrase(words, 0.2)
    if kind in ("intr", "stat") and self.coin(0.35):
      self.prepositional_phrase(words, 0.2)
    if kind in ("intr", "stat", "trans", "have") and self.coin(0.2):
      words.append(self.pick(_POST_ADVERBS))
    if coordinate and self.coin(0.1):
      words.append("and")
      self.verb_phrase(words, number, animacy, past, coordinate=False)
    return index

  def relative_clause(self, words: list, head_number: int, head_animacy: str,
                      construction: str) -> None:
    """Appends a subject ("src") or object ("orc") relative clause modifying the head."""
    words.append("that" if self.coin(0.6) else ("who" if head_animacy == "a" else "which"))
    if construction == "orc":
      forms, _ = self.transitive(head_animacy)
      inner_number = self.number()
      self.noun_phrase(words, inner_number, "a", 0.2)
      words.append(self.verb(forms, inner_number, self.coin(0.2)))
    else:
      self.verb_phrase(words, head_number, head_animacy, self.coin(0.2), coordinate=False)

  def sentence(self) -> Sentence:
    """One sentence of at most MAX_WORDS words."""
    while True:
      words: list[str] = []
      number, animacy = self.number(), self.animacy(0.65)
      construction = self.weighted({"simple": 0.4, "pp": 0.25, "src": 0.2, "orc": 0.15})
      # Object relatives ("the dog that the cats chase") favour animate heads.
      if construction == "orc" and animacy == "i" and self.coin(0.5):
        animacy = "a"
      head = self.noun_phrase(words, number, animacy, 0.0)
      if construction == "pp":
        self.prepositional_phrase(words, 0.35)
      elif construction != "simple":
        self.relative_clause(words, number, animacy, construction)
      if self.coin(0.15):
        words.append(self.pick(_PRE_ADVERBS))
      verb = self.verb_phrase(words, number, animacy, self.coin(0.2), coordinate=True)
      if self.coin(0.25):
        words.extend(self.pick(_CONJUNCTIONS))
        if self.coin(0.4):
          words.append(self.pick(_PRONOUNS[animacy, number]))
          number2, animacy2 = number, animacy
        else:
          number2, animacy2 = self.number(), self.animacy()
          self.noun_phrase(words, number2, animacy2, 0.2)
        self.verb_phrase(words, number2, animacy2, self.coin(0.2), coordinate=False)
      if len(words) <= MAX_WORDS:
        return Sentence(tuple(words), head, verb, construction)


def generate_sentences(num: int, seed: int) -> list[Sentence]:
  """`num` sentences drawn from the grammar with a random.Random seeded with `seed`."""
  sampler = _Sampler(seed)
  return [sampler.sentence() for _ in range(num)]


# ----------------------------------------------------------------------------- agreement
def dependency_stats(words: Sequence[str], head: int, verb: int) -> tuple[int, int]:
  """(distance, attractors) of the dependency between words[head] and words[verb].

  distance = number of words strictly between the head noun and the verb;
  attractors = number of nouns among them whose number differs from the head noun's.
  """
  head_number = NOUN_NUMBER[words[head]]
  between = words[head + 1:verb]
  return len(between), sum(1 for w in between if NOUN_NUMBER.get(w, head_number) != head_number)


class _Parser:
  """Recursive-descent analysis of a sentence prefix that ends right before the main verb.

  This is the grammar's agreement rule written independently of the sampler: it finds the
  subject's head noun and checks every agreement inside the subject (determiner-noun, the
  verb of a subject relative with the head, the verb of an object relative with its subject).
  """

  def __init__(self, words: Sequence[str]):
    self.words, self.i = list(words), 0

  def _fail(self, expected: str):
    got = self.words[self.i] if self.i < len(self.words) else "the end"
    raise GrammarError(f"cannot analyse '{' '.join(self.words)}': expected {expected} at "
                       f"word {self.i} but found '{got}'; pass a prefix the grammar generates")

  def peek(self) -> str | None:
    return self.words[self.i] if self.i < len(self.words) else None

  def noun_phrase(self, allow_relative: bool) -> int:
    det = self.peek()
    numbers = {n for n, dets in _DETERMINERS.items() if det in dets or
               (det == "an" and n == SG)}
    if not numbers:
      self._fail("a determiner")
    self.i += 1
    while self.peek() in _ALL_ADJECTIVES:
      self.i += 1
    noun = self.peek()
    if noun not in NOUN_NUMBER or NOUN_NUMBER[noun] not in numbers:
      self._fail(f"a noun agreeing with '{det}'")
    head = self.i
    self.i += 1
    while self.peek() in _PREPOSITIONS:
      self.i += 1
      self.noun_phrase(allow_relative=False)
    if allow_relative and self.peek() in ("that", "who", "which"):
      self.i += 1
      self.relative_clause(head)
    return head

  def agreeing_verb(self, subject: int, classes: tuple[str, ...]) -> str:
    verb = self.peek()
    if verb not in _VERBS or _VERBS[verb][0] not in classes:
      self._fail(f"a verb of class {'/'.join(classes)}")
    if _VERBS[verb][1] not in (None, NOUN_NUMBER[self.words[subject]]):
      self._fail(f"a verb agreeing with '{self.words[subject]}'")
    self.i += 1
    return _VERBS[verb][0]

  def relative_clause(self, head: int) -> None:
    if self.peek() in _VERBS:  # subject relative: the verb agrees with the head
      cls = self.agreeing_verb(head, ("intr", "stat", "trans", "be", "have"))
      if cls in ("trans", "have"):
        self.noun_phrase(allow_relative=False)
      elif cls == "be" and self.peek() in _PREPOSITIONS:
        self.i += 1
        self.noun_phrase(allow_relative=False)
      elif cls == "be":
        if self.peek() == "very":
          self.i += 1
        if self.peek() not in _ALL_ADJECTIVES:
          self._fail("an adjective")
        self.i += 1
      elif self.peek() in _PREPOSITIONS:
        self.i += 1
        self.noun_phrase(allow_relative=False)
      if self.peek() in _POST_ADVERBS:
        self.i += 1
    else:  # object relative: its own subject, then a transitive verb agreeing with it
      inner = self.noun_phrase(allow_relative=False)
      self.agreeing_verb(inner, ("trans",))

  def subject(self) -> int:
    head = self.noun_phrase(allow_relative=True)
    if self.peek() in _PRE_ADVERBS:
      self.i += 1
    if self.peek() is not None:
      self._fail("the main verb")
    return head


def subject_head(prefix: Sequence[str]) -> int:
  """Index of the subject's head noun in a prefix that stops right before the main verb.

  Raises GrammarError when the prefix is not a subject (with optional adverb) of the grammar
  or any agreement inside it is violated.
  """
  return _Parser(prefix).subject()


def agrees(prefix: Sequence[str], verb: str) -> bool:
  """The grammar's agreement rule: does `verb` agree in number with the prefix's subject?"""
  number = verb_number(verb)
  if number is None:
    raise GrammarError(f"'{verb}' does not agree in number; pass a present tense verb or "
                       "was/were")
  return NOUN_NUMBER[prefix[subject_head(prefix)]] == number


def probe_item(sentence: Sentence) -> dict | None:
  """The agreement probe of a sentence's first clause, or None when its verb is past tense."""
  correct = sentence.words[sentence.verb]
  if verb_number(correct) is None:
    return None
  distance, attractors = dependency_stats(sentence.words, sentence.head, sentence.verb)
  return {"prefix": " ".join(sentence.words[:sentence.verb]), "correct": correct,
          "wrong": other_number(correct), "distance": distance, "attractors": attractors,
          "construction": sentence.construction}


def build_probe_set(exclude: set[str], seed: int, size: int = PROBE_SIZE) -> list[dict]:
  """`size` probe items from fresh samples, balanced over (construction, distance) cells.

  Sentences whose text is in `exclude` (the training sentences) and repeated prefixes are
  skipped. Cells are filled round-robin so short and long dependencies are both well covered;
  distances above MAX_PROBE_DISTANCE are not used. Every item is checked with `agrees`.
  """
  cells: dict[tuple[str, int], list[dict]] = {}
  seen = set()
  for sentence in generate_sentences(40 * size, seed):
    item = probe_item(sentence)
    if (item is None or item["distance"] > MAX_PROBE_DISTANCE or item["prefix"] in seen
        or " ".join(sentence.words) in exclude):
      continue
    seen.add(item["prefix"])
    cells.setdefault((item["construction"], item["distance"]), []).append(item)
  chosen, rank = [], 0
  while len(chosen) < size and any(len(c) > rank for c in cells.values()):
    for key in sorted(cells, key=lambda k: (CONSTRUCTIONS.index(k[0]), k[1])):
      if rank < len(cells[key]) and len(chosen) < size:
        chosen.append(cells[key][rank])
    rank += 1
  for item in chosen:
    if not agrees(item["prefix"].split(), item["correct"]):
      raise AssertionError(f"generated probe violates agreement: {item}")
  return sorted(chosen, key=lambda it: (CONSTRUCTIONS.index(it["construction"]),
                                        it["distance"], it["attractors"], it["prefix"]))


# ----------------------------------------------------------------------------- files
def write_gzip(path: pathlib.Path, lines: Sequence[str]) -> None:
  """Writes lines (each + "\\n", UTF-8) gzipped with mtime 0 and no file name: deterministic."""
  with open(path, "wb") as raw:
    with gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=9, mtime=0) as gz:
      gz.write("".join(line + "\n" for line in lines).encode("utf-8"))


def write_corpus(out_dir, seed: int = 0) -> dict[str, int]:
  """Generates the splits and the probe set into out_dir; returns the line count per file."""
  out = pathlib.Path(out_dir)
  try:
    out.mkdir(parents=True, exist_ok=True)
    splits = {}
    for index, (split, size) in enumerate(SPLIT_SIZES.items()):
      splits[split] = [" ".join(s.words) for s in generate_sentences(size, 10 * seed + index)]
      write_gzip(out / corpus.EMBEDDED_LAYOUT.format(split=split), splits[split])
    probes = build_probe_set(set(splits["train"]), 10 * seed + len(SPLIT_SIZES))
    write_gzip(out / corpus.AGREEMENT_FILE, [json.dumps(p) for p in probes])
  except OSError as e:
    raise GrammarError(f"cannot write the corpus to {out}: {e.strerror}; pass a writable "
                       "--out_dir") from e
  return {**{corpus.EMBEDDED_LAYOUT.format(split=k): len(v) for k, v in splits.items()},
          corpus.AGREEMENT_FILE: len(probes)}


def main(argv: Sequence[str]) -> None:
  """Command-line entry point: writes the corpus to --out_dir, prints the line counts."""
  if len(argv) > 1:
    sys.exit(f"unexpected arguments {argv[1:]}; use --out_dir=DIR [--seed=N]")
  try:
    counts = write_corpus(flags.FLAGS.out_dir, flags.FLAGS.seed)
  except GrammarError as e:
    sys.exit(str(e))
  print(json.dumps(counts))


if __name__ == "__main__":
  # Defined here, not at import, so importing the grammar never clashes with other flags.
  flags.DEFINE_string("out_dir", str(corpus.embedded_dir()), "Directory to write the corpus "
                      "into.")
  flags.DEFINE_integer("seed", 0, "Seed of the grammar's sampler (the shipped files: 0).")
  app.run(main)
