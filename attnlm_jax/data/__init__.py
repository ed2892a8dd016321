"""Corpora, vocabulary and batches for the language models (see docs/data.md)."""

from attnlm_jax.data.corpus import CORPORA
from attnlm_jax.data.corpus import CorpusError
from attnlm_jax.data.corpus import read_split
from attnlm_jax.data.corpus import SPLITS
from attnlm_jax.data.corpus import SplitText
from attnlm_jax.data.pipeline import LMData
from attnlm_jax.data.pipeline import load
from attnlm_jax.data.vocab import EOS
from attnlm_jax.data.vocab import EOS_ID
from attnlm_jax.data.vocab import PAD
from attnlm_jax.data.vocab import PAD_ID
from attnlm_jax.data.vocab import UNK
from attnlm_jax.data.vocab import UNK_ID
from attnlm_jax.data.vocab import Vocabulary
from attnlm_jax.data.vocab import VocabularyError

__all__ = ["CORPORA", "CorpusError", "EOS", "EOS_ID", "LMData", "PAD", "PAD_ID", "SPLITS",
           "SplitText", "UNK", "UNK_ID", "Vocabulary", "VocabularyError", "load", "read_split"]
