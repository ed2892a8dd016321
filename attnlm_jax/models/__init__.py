"""The attentive LSTM language models: the API of `lm.py` (init, apply, step, ...) and the
pieces it is built from (`nn`, `lstm`, `memory`, `scores`, `heads`, `recurrent`, `losses`)."""

from attnlm_jax.models.lm import apply
from attnlm_jax.models.lm import apply_window
from attnlm_jax.models.lm import ATTENTION_FORMS
from attnlm_jax.models.lm import COMPUTE_DTYPES
from attnlm_jax.models.lm import count_params
from attnlm_jax.models.lm import DecodeState
from attnlm_jax.models.lm import default_config
from attnlm_jax.models.lm import has_output_layer
from attnlm_jax.models.lm import has_sentence_attention
from attnlm_jax.models.lm import HEAD
from attnlm_jax.models.lm import HIDDEN_STATES
from attnlm_jax.models.lm import init
from attnlm_jax.models.lm import init_state
from attnlm_jax.models.lm import init_stream_state
from attnlm_jax.models.lm import SCORE_FUNCTIONS
from attnlm_jax.models.lm import STATS
from attnlm_jax.models.lm import step
from attnlm_jax.models.lm import trainable
from attnlm_jax.models.lm import uses_batch_statistics
from attnlm_jax.models.lm import validate
from attnlm_jax.models.lm import visible_slots

__all__ = ["ATTENTION_FORMS", "COMPUTE_DTYPES", "DecodeState", "HEAD", "HIDDEN_STATES",
           "SCORE_FUNCTIONS", "STATS", "apply", "apply_window", "count_params",
           "default_config", "has_output_layer", "has_sentence_attention", "init", "init_state",
           "init_stream_state", "step", "trainable", "uses_batch_statistics", "validate",
           "visible_slots"]
