"""The attentive LSTM language models: init, apply, and incremental decoding.

An embedding E [V, H] tied to the softmax, stacked LSTM layers (`lstm.py`), an optional
attention over a memory of the last layer's past outputs (`scores.py`, `memory.py`) and an
output layer (`heads.py`) (Salton et al. 2017; Salton & Kelleher 2018):

    x_t = E[w_t];  h_t = LSTM(x_t, ...);  c_t = attend(h_t, [h_0 = 0, h_1 .. h_{t-1}])
    h'_t = head(h_t, c_t);  p(w_{t+1} | w_1..t) = softmax(h'_t E^T + b)

Dropout, the "scan" and "parallel" forms and `step`: docs/models.md, "The LSTM", "Two forms,
one function" and "Fast paths".
"""

from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from attnlm_jax.common.errors import ConfigError
from attnlm_jax.models import heads
from attnlm_jax.models import losses
from attnlm_jax.models import lstm
from attnlm_jax.models import memory as memory_lib
from attnlm_jax.models import nn
from attnlm_jax.models import recurrent
from attnlm_jax.models import scores

SCORE_FUNCTIONS = scores.SCORE_FUNCTIONS
ATTENTION_FORMS = ("parallel", "scan")
COMPUTE_DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}
STATS = "batch_stats"
HEAD = "head"  # The parameters of the output layer h'_t (`heads`), where the model has one.
# The hidden states `apply(return_hidden=True)` can return: "lstm", the last LSTM layer's
# output h_t (what attention reads); "head", the output layer's h'_t (what the softmax reads:
# h_t itself for the models without an output layer, `none` and the DAS/LSTMN models).
HIDDEN_STATES = ("lstm", "head")
HEAD_ACTIVATIONS = ("tanh", "linear")
DROPOUT_SITES = ("before_head", "after_head")
HEAD_BIAS_INITS = ("zeros", "uniform")
MEMORIES = ("filled", "zero_slot")


def default_config() -> ml_collections.ConfigDict:
  """The model section of a config, with the PTB medium recipe's values."""
  config = ml_collections.ConfigDict()
  config.vocab_size = 0           # Vocabulary size; 0 = taken from the data's vocabulary.
  config.hidden_size = 650        # LSTM units = embedding size (tied to the softmax).
  config.num_layers = 2           # Stacked LSTM layers.
  config.dropout = 0.5            # Dropout on embeddings, between layers and on the output.
  config.score = "single"         # Attention score: one of scores.SCORE_FUNCTIONS.
  config.max_len = 35             # Memory buffer slots in training (= training truncation).
  config.zero_slot = True         # Keep the always-valid zero state h_0 = 0 in the memory.
  config.tape_slots = 0           # LSTMN tapes: the zero slot and the last tape_slots - 1
                                  # (h, c) states (0: as many as the memory holds).
  config.forget_bias = 0.0        # Initial forget-gate bias (1.0 for the averaging LM).
  config.init_scale = 0.05        # Weights start U(-init_scale, init_scale); biases 0.
  config.attention_form = "parallel"  # "parallel" (fast) or "scan" (reference) in apply().
  config.compute_dtype = "float32"    # Matmul input dtype: "float32" or "bfloat16".
  config.unroll = 1               # lax.scan unroll factor (1: fastest measured, docs/models.md).
  config.streaming_min_len = 128  # single/average: sequences this long or longer use the
                                  # O(T H) running-mean form in apply() (docs/models.md).
  config.score_block_elements = 2**26  # Queries attend in blocks whose [B, Q, L, H] score
                                       # tensor (combined, conv1x1) stays under this size.
  config.tie_embeddings = True    # Softmax weights = the embedding (False: a matrix of its
                                  # own, as in Zaremba et al. 2015).
  config.pos_tags = False         # Input [word embedding; POS-tag embedding] (needs tags).
  config.num_tags = 0             # Tag vocabulary size (tagger.TAG_SPECIALS included).
  config.tag_size = 50            # POS-tag embedding size.
  # What the released code of Salton et al. (2017) does differently (docs/models.md, "The
  # released code"); each default is the paper's choice.
  config.head_activation = "tanh"     # Output layer h'_t = tanh(W [h_t; c_t] + b); "linear":
                                      # h'_t = W [h_t; c_t] + b, the released code's merge.
  config.dropout_site = "before_head"  # Output dropout on h_t, which attention and the output
                                       # layer read; "after_head": on h'_t (the released code).
  config.head_bias_init = "zeros"     # Output layer bias b: "zeros", or "uniform" in
                                      # (-init_scale, init_scale) (the released code).
  config.memory = "filled"            # Attend over h_0 = 0, h_1 .. h_{t-1}; "zero_slot": over
                                      # h_0 = 0 alone, all the released code's training graph
                                      # holds (its context is 0 and attention gets no gradient).
  return config


class DecodeState(NamedTuple):
  """What `step` carries from one token to the next."""
  lstm: tuple          # one lstm.LSTMState per layer
  memory: memory_lib.Memory | memory_lib.RunningMean     # the running mean: single, average
  inputs: Optional[memory_lib.Memory] = None   # das: the input embeddings m_1..m_t
  tapes: Optional[recurrent.Tapes] = None      # lstmn: the h and c tapes and ~h_{t-1}


def validate(config) -> None:
  """Raises ConfigError for a config the models cannot run."""
  scores.get(config.score)
  if config.attention_form not in ATTENTION_FORMS:
    raise ConfigError(f"unknown attention_form {config.attention_form!r} "
                      f"(config.model.attention_form); choose one of: {', '.join(ATTENTION_FORMS)}")
  if config.compute_dtype not in COMPUTE_DTYPES:
    raise ConfigError(f"unknown compute_dtype {config.compute_dtype!r} "
                      f"(config.model.compute_dtype); choose one of: {', '.join(COMPUTE_DTYPES)}")
  for field in ("vocab_size", "hidden_size", "num_layers", "max_len", "score_block_elements",
                "unroll"):
    if config[field] < 1 + (field == "max_len"):
      raise ConfigError(f"config.model.{field} = {config[field]} is too small")
  tape_slots = config.get("tape_slots", 0)
  if tape_slots < 0 or tape_slots == 1:
    raise ConfigError(f"config.model.tape_slots = {tape_slots}: a tape needs at least 2 slots, "
                      "the zero slot and one state (0: as many as the memory holds)")
  if tape_slots and "lstmn" not in scores.get(config.score).recurrence:
    raise ConfigError(f"config.model.tape_slots = {tape_slots} sizes the LSTMN's tapes, and "
                      f"score {config.score!r} has none: use lstmn or das_lstmn, or leave it at 0")
  if not 0.0 <= config.dropout < 1.0:
    raise ConfigError(f"config.model.dropout = {config.dropout} must be in [0, 1)")
  for field, choices in (("head_activation", HEAD_ACTIVATIONS),
                         ("dropout_site", DROPOUT_SITES), ("head_bias_init", HEAD_BIAS_INITS),
                         ("memory", MEMORIES)):
    if config.get(field, choices[0]) not in choices:
      raise ConfigError(f"unknown {field} {config[field]!r} (config.model.{field}); choose one "
                        f"of: {', '.join(choices)}")
  if _zero_slot_only(config) and not (config.zero_slot and scores.get(config.score).attend):
    raise ConfigError("config.model.memory='zero_slot' attends over the zero slot alone: it "
                      "needs config.model.zero_slot=True and a score with attention "
                      f"(not {config.score!r})")
  head = heads.HEADS[scores.get(config.score).head]
  if _zero_slot_only(config) and head.has_stats:
    raise ConfigError(f"config.model.memory='zero_slot' with score {config.score!r}: its batch "
                      "norm keeps statistics per sentence position, which a memory that is "
                      "never written does not count; use memory='filled'")
  if config.get("head_activation", "tanh") == "linear" and not head.has_tanh:
    raise ConfigError(f"config.model.head_activation='linear' removes the output layer's tanh, "
                      f"and score {config.score!r}'s output layer has none: use 'tanh'")
  if config.get("head_bias_init", "zeros") == "uniform" and "b" not in head.params:
    raise ConfigError(f"config.model.head_bias_init='uniform' draws the output layer's bias "
                      f"b_c, and score {config.score!r}'s output layer has none: use 'zeros'")
  if config.pos_tags and min(config.num_tags, config.tag_size) < 1:
    raise ConfigError(f"config.model.pos_tags needs num_tags >= 1 and tag_size >= 1 "
                      f"(got {config.num_tags}, {config.tag_size}): set them from the tagger")


def _zero_slot_only(config) -> bool:
  """Whether the memory holds the zero slot alone (`config.memory`)."""
  return config.get("memory", "filled") == "zero_slot"


def _input_sizes(config, score) -> tuple[dict, int]:
  """(stream name -> embedding size of the input m_t, first LSTM layer's input size)."""
  streams = {"words": config.hidden_size}
  if config.pos_tags:
    streams["tags"] = config.tag_size
  embed_size = sum(streams.values())
  return streams, embed_size * (2 if "das" in score.recurrence else 1)


def init(rng: jax.Array, config) -> dict:
  """Parameters: U(-init_scale, init_scale) weights, zero biases (papers' initialisation)."""
  validate(config)
  score = scores.get(config.score)
  head = heads.HEADS[score.head]
  hidden = config.hidden_size
  streams, first_input = _input_sizes(config, score)
  rng_embed, rng_lstm, rng_score, rng_head = jax.random.split(rng, 4)
  rng_rec, rng_tags = jax.random.split(jax.random.fold_in(rng, 1))
  params = {
      "embed": nn.uniform_init(rng_embed, (config.vocab_size, hidden), config.init_scale),
      "lstm": [lstm.init_layer(key, first_input if depth == 0 else hidden, hidden,
                               config.init_scale, config.forget_bias)
               for depth, key in enumerate(jax.random.split(rng_lstm, config.num_layers))],
      "out_bias": jnp.zeros((config.vocab_size,), jnp.float32),
  }
  if config.pos_tags:
    params["tag_embed"] = nn.uniform_init(rng_tags, (config.num_tags, config.tag_size),
                                          config.init_scale)
  if not config.tie_embeddings:
    params["softmax"] = nn.uniform_init(jax.random.fold_in(rng, 2),
                                        (config.vocab_size, hidden), config.init_scale)
  if score.feeds_recurrence:
    params["recurrent"] = recurrent.init(rng_rec, score.recurrence, hidden_size=hidden,
                                         stream_sizes=streams,
                                         init_scale=config.init_scale)
  sizes = {"H": hidden, "S": config.max_len - 1}
  if score.params:
    params["score"] = _init_from_spec(rng_score, score.params, sizes, config.init_scale)
  if head.params:
    params[HEAD] = _init_from_spec(rng_head, head.params, sizes, config.init_scale)
    if config.get("head_bias_init", "zeros") == "uniform":
      params[HEAD]["b"] = nn.uniform_init(jax.random.fold_in(rng_head, 1), (hidden,),
                                            config.init_scale)
  if head.has_stats:
    params[STATS] = heads.init_stats(config.max_len, hidden)
  return params


def uses_batch_statistics(config) -> bool:
  """Whether training normalises with each batch's statistics (the `conv1x1` batch norm), so
  that a row's output depends on the other rows of its batch."""
  return heads.HEADS[scores.get(config.score).head].has_stats


def has_output_layer(config) -> bool:
  """Whether the model's output layer h'_t has parameters (`params[HEAD]`): every score but
  `none` and the recurrent ones (`lstmn`, `das`, ...), whose h'_t is h_t."""
  return bool(heads.HEADS[scores.get(config.score).head].params)


def _init_from_spec(rng, spec: dict, sizes: dict, init_scale: float) -> dict:
  """Initialises {name: (shape symbols, initialiser)} (see `scores.Score`)."""
  params = {}
  for key, (name, (symbols, kind)) in zip(jax.random.split(rng, len(spec)), spec.items()):
    shape = tuple(sizes[s] for s in symbols)
    params[name] = {
        "uniform": lambda k, s: nn.uniform_init(k, s, init_scale),
        "xavier": nn.xavier_init,
        "zeros": lambda k, s: jnp.zeros(s, jnp.float32),
        "ones": lambda k, s: jnp.ones(s, jnp.float32),
    }[kind](key, shape)
  return params


def trainable(params: dict) -> dict:
  """The parameters that gradients update (everything but the batch-norm statistics)."""
  return {k: v for k, v in params.items() if k != STATS}


def count_params(params: dict) -> int:
  """Number of trainable scalars."""
  return int(sum(np.prod(x.shape) for x in jax.tree.leaves(trainable(params))))


class _Dropout(NamedTuple):
  """Dropout multipliers for a whole batch, time-major: embed [T, B, D] (D: the size of the
  input m_t), output [T, B, H], between [num_layers - 1, T, B, H]. Drawn once, outside any
  scan, so both forms see the same."""
  embed: jax.Array
  between: jax.Array
  output: jax.Array


def _dropout(rng, config, rows: jax.Array, num_steps: int, embed_size: int) -> _Dropout:
  """The masks of each row drawn from `fold_in(rng, row)`: a row's masks depend on the rng and
  its index in the global batch only, so a batch split over devices draws the masks of the
  whole batch on one device."""
  rate, hidden = config.dropout, config.hidden_size

  def row_masks(row):
    rng_embed, rng_between, rng_output = jax.random.split(jax.random.fold_in(rng, row), 3)
    return (nn.dropout_mask(rng_embed, rate, (num_steps, embed_size)),
            nn.dropout_mask(rng_between, rate, (config.num_layers - 1, num_steps, hidden)),
            nn.dropout_mask(rng_output, rate, (num_steps, hidden)))

  embed, between, output = jax.vmap(row_masks)(rows)
  return _Dropout(jnp.swapaxes(embed, 0, 1), jnp.transpose(between, (1, 2, 0, 3)),
                  jnp.swapaxes(output, 0, 1))


def has_sentence_attention(config) -> bool:
  """Whether `apply(return_attention=True)` returns weights over the sentence's slots: every
  score with attention, except an LSTMN whose `tape_slots` keep its tape as a ring."""
  if config.score == "lstmn" and config.get("tape_slots", 0):
    return False
  score = scores.get(config.score)
  return score.attend is not None or score.feeds_recurrence


def apply(params: dict, config, tokens: jax.Array, lengths: jax.Array, *, train: bool = False,
          rng: Optional[jax.Array] = None, return_attention: bool = False,
          mutable: bool = False, tags: Optional[jax.Array] = None,
          rows: Optional[jax.Array] = None, return_hidden: bool = False,
          hidden: str = "lstm"):
  """Next-token logits [B, T, V] for input tokens [B, T] (int32) with `lengths` [B]; every
  row starts from the zero state (the sentence protocol).

  return_attention: also return the attention weights [B, T, L] (L = T slots): over the
    memory [h_0 = 0, h_1 .. h_{t-1}] for the output-layer scores; over the inputs m_1..m_T for
    `das` and `das_lstmn` (the word stream's weights); over the tape [h_0 = 0, h_1 ..] for
    `lstmn` (not with `config.tape_slots`, whose tape is a ring).
  return_hidden: also return (last, after the weights if asked) the hidden states named by
    `hidden` (`HIDDEN_STATES`): the last LSTM layer's output h_t [B, T, H], the output
    layer's input (after the output dropout in training), or that layer's h'_t, the
    softmax's input: what the neural cache stores (`cache.py`).
  mutable: return (outputs, updates), `updates` to merge into params as {**params, **updates}
    (the new batch-norm statistics of training mode; empty otherwise).
  train: dropout on (needs `rng`) and batch-norm batch statistics.
  tags: int32 [B, T], the POS tag of each input token (needed iff `config.pos_tags`).
  rows: int32 [B], each row's index in the global batch (default 0..B-1): it seeds the row's
    dropout masks, so the rows of a batch split over devices get the masks they get on one.

  `config.attention_form` picks the form for the output-layer scores; the scores that feed the
  recurrence (`scores.RECURRENT_SCORES`) always use the scan form, whatever it says.
  """
  if return_attention and not has_sentence_attention(config):
    raise ConfigError(
        f"config.model.tape_slots = {config.tape_slots} keeps the LSTMN's tape as a ring, whose "
        "slots are not the sentence's positions: its weights cannot be drawn over the sentence "
        "(a tape of 0 slots holds the whole sentence)" if config.get("tape_slots", 0)
        else f"score {config.score!r} has no attention weights to return")
  logits, weights, updates, _, states = _forward(params, config, tokens, lengths, None,
                                                 train=train, rng=rng,
                                                 need_weights=return_attention, tags=tags,
                                                 rows=rows)
  extras = ((weights,) if return_attention else ()) + (
      (_hidden(states, hidden),) if return_hidden else ())
  outputs = (logits, *extras) if extras else logits
  return (outputs, updates) if mutable else outputs


def apply_window(params: dict, config, tokens: jax.Array, lengths: jax.Array,
                 state: DecodeState, *, train: bool = False, rng: Optional[jax.Array] = None,
                 tags: Optional[jax.Array] = None, rows: Optional[jax.Array] = None,
                 return_hidden: bool = False, hidden: str = "lstm"):
  """One window of the stream protocol: logits [B, T, V] of the window's tokens [B, T] given
  the `state` the previous window left (`init_stream_state` before the first).

  The LSTM states and the memory (for `das`/`lstmn` also the input buffer and the tapes)
  continue from `state`, the gradient stopped at it (docs/models.md, "The stream protocol").
  `lengths` [B] < T only in a stream's last window.

  Returns:
    (logits, the state after the window, updates as in `apply(mutable=True)`); with
    `return_hidden`, (logits, the `hidden` states as in `apply`) in place of the logits.
  """
  state = jax.lax.stop_gradient(state)
  logits, _, updates, state, states = _forward(params, config, tokens, lengths, state,
                                               train=train, rng=rng, need_weights=False,
                                               tags=tags, rows=rows)
  return (logits, _hidden(states, hidden)) if return_hidden else logits, state, updates


def _hidden(states: dict, name: str) -> jax.Array:
  """The hidden states called `name` of `_forward`'s {HIDDEN_STATES: [B, T, ...]}."""
  if name not in states:
    raise ConfigError(f"unknown hidden states {name!r}: choose one of "
                      f"{', '.join(HIDDEN_STATES)}")
  return states[name]


def _forward(params, config, tokens, lengths, state, *, train, rng, need_weights, tags, rows):
  """(logits, weights or None, updates, state after the sequence or None, the hidden states
  {"lstm": the last layer's h_t, "head": the output layer's h'_t}) of `apply` (state None:
  zero start) and `apply_window`."""
  validate(config)
  score = scores.get(config.score)
  if train and config.dropout > 0 and rng is None:
    raise ValueError("apply(train=True) needs an rng for dropout")
  batch_size, num_steps = tokens.shape
  valid = losses.token_mask(lengths, num_steps)                                # [B, T]
  embedded = jnp.swapaxes(_embed(params, config, tokens, tags), 0, 1)          # [T, B, D]
  rows = jnp.arange(batch_size) if rows is None else rows
  drop = (_dropout(rng, config, rows, num_steps, embedded.shape[-1])
          if train and config.dropout > 0 else None)
  if drop is not None:
    embedded = embedded * drop.embed
  parallel = config.attention_form == "parallel" and not score.feeds_recurrence
  form = _parallel if parallel else _scan
  query, context, weights, state = form(params, config, score, embedded, lengths, drop,
                                        state, need_weights)
  features, new_stats = _head(params, config, score, query, context, valid, train,
                              positions=jnp.arange(num_steps))
  if drop is not None and _dropout_after_head(config):
    features = features * jnp.swapaxes(drop.output, 0, 1)
  updates = {STATS: new_stats} if new_stats is not None else {}
  return (_logits(params, config, features), weights, updates, state,
          {"lstm": query, "head": features})


def _dropout_after_head(config) -> bool:
  """Whether the output dropout falls on h'_t rather than on h_t (`config.dropout_site`)."""
  return config.get("dropout_site", "before_head") == "after_head"


def _compute_dtype(config):
  return COMPUTE_DTYPES[config.compute_dtype]


def _embed(params: dict, config, tokens: jax.Array, tags: Optional[jax.Array]) -> jax.Array:
  """The input m_t: w_t = E x_t, or [w_t; p_t] with POS tags (Cao & Yu eqs. 16-18)."""
  words = params["embed"][tokens]
  if not config.pos_tags:
    return words
  if tags is None:
    raise ConfigError("config.model.pos_tags is on but no tags were given: pass the tagged "
                      "corpus's tags (tagger.tag_corpus) or set pos_tags=False")
  return jnp.concatenate([words, params["tag_embed"][tags]], axis=-1)


def _first_gates(params: dict, embedded: jax.Array, compute_dtype) -> jax.Array:
  """The first layer's gates from m_t alone, `m_t W_x[:D] + b` (hoisted out of the scan).

  For `das` the first layer's W_x also has rows for the context m'_t, added in the step.
  """
  layer = params["lstm"][0]
  return lstm.input_gates({**layer, "w_x": layer["w_x"][:embedded.shape[-1]]}, embedded,
                          compute_dtype)


def _parallel(params, config, score, embedded, lengths, drop, state, need_weights: bool):
  """Layer by layer (hoisted input projections), then all steps' attention at once.

  `single` and `average` sequences of `config.streaming_min_len` steps or more (unless the
  weights are needed) take the running-mean prefix form instead of the [B, T, L] weights.
  With a carried `state` (a stream window) the layers start from its (h, c) and the steps
  attend over [carried buffer; the window's states] (`memory.window_mask`).
  Returns (query, context, weights, the state after the sequence or None).
  """
  cdt = _compute_dtype(config)
  batch_size = embedded.shape[1]
  inputs, finals = embedded, []
  for depth, layer in enumerate(params["lstm"]):
    if depth > 0 and drop is not None:
      inputs = inputs * drop.between[depth - 1]
    gates_x = lstm.input_gates(layer, inputs, cdt)                             # [T, B, 4H]
    initial = (lstm.zero_state(batch_size, config.hidden_size) if state is None
               else state.lstm[depth])
    final, inputs = lstm.scan_layer(layer, gates_x, initial, cdt, config.unroll)
    finals.append(final)
  outputs = jnp.swapaxes(inputs, 0, 1)                                         # [B, T, H]
  query = (outputs * jnp.swapaxes(drop.output, 0, 1)
           if drop is not None and not _dropout_after_head(config) else outputs)
  if state is not None:
    state = state._replace(lstm=tuple(finals))
  if score.attend is None:
    return query, None, None, state
  if state is not None:
    return _attend_window(params, config, score, query, outputs, lengths, state)
  memory, num_steps = memory_lib.shifted(outputs), outputs.shape[1]
  if score.streaming and num_steps >= config.streaming_min_len and not need_weights:
    slot_scores = _slot_scores(params, score, memory, cdt)
    valid = visible_slots(config, memory_lib.slot_mask(lengths, num_steps, config.zero_slot))
    return query, memory_lib.prefix_means(slot_scores, memory, valid), None, None
  mask = visible_slots(config, memory_lib.causal_mask(lengths, num_steps, config.zero_slot))
  context, weights = scores.attend_in_blocks(score, params.get("score"), query, memory, mask,
                                             cdt, config.score_block_elements)
  return query, context, weights, None


def visible_slots(config, mask: jax.Array) -> jax.Array:
  """The slots attention may read: `mask` [..., L], or the zero slot alone under
  `config.memory = "zero_slot"`."""
  return mask & (jnp.arange(mask.shape[-1]) == 0) if _zero_slot_only(config) else mask


def _attend_window(params, config, score, query, outputs, lengths, state: DecodeState):
  """A stream window's attention over [the carried buffer; its own states h_0 .. h_{T-1}],
  and the state with the buffer that holds the last `capacity - 1` of them."""
  cdt = _compute_dtype(config)
  carried = memory_lib.chronological(state.memory)
  num_steps = outputs.shape[1]
  slots = jnp.concatenate([carried.states, outputs], axis=1)                   # [B, L + T, H]
  mask = memory_lib.window_mask(carried.mask, lengths, num_steps)
  context, weights = scores.attend_in_blocks(score, params.get("score"), query, slots, mask,
                                             cdt, config.score_block_elements)
  valid = losses.token_mask(lengths, num_steps)
  memory = memory_lib.window_tail(slots, jnp.concatenate([carried.mask, valid], axis=1),
                                  carried.states.shape[1])
  if score.key is not None:
    memory = memory._replace(keys=score.key(params["score"], memory.states, cdt))
  return query, context, weights, state._replace(memory=memory)


def _slot_scores(params, score, memory: jax.Array, compute_dtype) -> jax.Array:
  """The query-independent scores [B, L] of a streaming score's slots [B, L, H] (0: average)."""
  if score.key is None:
    return jnp.zeros(memory.shape[:2], jnp.float32)
  return score.key(params["score"], memory, compute_dtype)


def _read_memory(params, config, score, memory, query):
  """Step t's context [B, H] and weights [B, L] (None for a running mean) from the memory."""
  if isinstance(memory, memory_lib.RunningMean):
    return memory_lib.running_read(memory), None
  positions = {"positions": memory_lib.slot_positions(memory)} if score.positional else {}
  context, weights = score.attend(params.get("score"), query[:, None], memory.states,
                                  memory.mask[:, None], _compute_dtype(config), memory.keys,
                                  **positions)
  return context[:, 0], weights[:, 0]


def _write_memory(params, config, score, memory, h, valid):
  """Writes h_t [B, H] (and its key, computed once here) into the memory."""
  cdt = _compute_dtype(config)
  if isinstance(memory, memory_lib.RunningMean):
    return memory_lib.running_write(memory, h, _slot_scores(params, score, h[:, None], cdt)[:, 0],
                                    valid)
  key = None if score.key is None else score.key(params["score"], h[:, None], cdt)[:, 0]
  return memory_lib.write(memory, h, valid, key)


def _read_recurrent(params, config, score, carry: DecodeState, embedded, gates_x, valid,
                    das_inputs=None):
  """The attention feeding the recurrence, before the layers run (`recurrent.py`).

  das: writes m_t into the input buffer (or, in a scan, takes the buffer at this step from
  `das_inputs` = (`recurrent.das_sequence`, the index of m_t in it, the buffer's capacity)),
  reads m'_t with the query h_{t-1} (the last layer's previous output) and adds m'_t W_x[D:]
  to the first layer's gates. lstmn: reads (~h_t, ~c_t) from the tapes with x_t = m_t (the
  input, without das's m'_t: Cao & Yu sec. 3.3) as the first layer's previous state.
  Returns (first-layer gates, first-layer previous state, carry with the new input buffer,
  weights [B, L] or None).
  """
  cdt = _compute_dtype(config)
  previous, weights = carry.lstm[0], None
  if "das" in score.recurrence:
    das_params, query = params["recurrent"]["das"], carry.lstm[-1].h
    if das_inputs is None:
      inputs = recurrent.write_inputs(das_params, carry.inputs, embedded, valid, cdt)
      context, stream_weights = recurrent.das_read(das_params, inputs, query, cdt)
      carry = carry._replace(inputs=inputs)
    else:
      sequence, last, capacity = das_inputs
      context, stream_weights = recurrent.das_read_at(das_params, sequence, last, capacity,
                                                      query, cdt)
    gates_x = gates_x + nn.dot(context, params["lstm"][0]["w_x"][embedded.shape[-1]:], cdt)
    weights = stream_weights["words"][:, 1:]                    # slot 0 of the buffer is unused
  if "lstmn" in score.recurrence:
    previous, tape_weights = recurrent.lstmn_read(params["recurrent"]["lstmn"], carry.tapes,
                                                  embedded, cdt)
    weights = tape_weights if weights is None else weights
  return gates_x, previous, carry, weights


def _time_step(params, config, score, carry: DecodeState, inputs, das_inputs=None):
  """One time step of the scan form: the attention feeding the recurrence (if any), all
  layers, then read the memory, then write h_t (and the LSTMN tapes).

  inputs: (the input m_t after dropout [B, D] (used only by the scores that feed the
  recurrence, else None), gates of the first layer's input [B, 4H], valid [B], dropout
  multipliers of this step (between [num_layers - 1, B, H], output [B, H]) or None).
  das_inputs: the DAS buffer of a whole scan (`_read_recurrent`); None: the carried one.
  Returns the new carry and (query h_t after dropout, context c_t, weights a_t).
  """
  cdt = _compute_dtype(config)
  embedded, gates_x, valid, drop = inputs
  previous, weights = carry.lstm[0], None
  if score.feeds_recurrence:
    gates_x, previous, carry, weights = _read_recurrent(params, config, score, carry, embedded,
                                                        gates_x, valid, das_inputs)
  states = []
  for depth, layer in enumerate(params["lstm"]):
    if depth > 0:
      below = states[-1].h if drop is None else states[-1].h * drop[0][depth - 1]
      gates_x = lstm.input_gates(layer, below, cdt)
    states.append(lstm.cell(layer, gates_x, previous if depth == 0 else carry.lstm[depth], cdt))
  h = states[-1].h
  query = h if drop is None or _dropout_after_head(config) else h * drop[1]
  context, new_memory = None, carry.memory
  if score.attend is not None:
    context, weights = _read_memory(params, config, score, carry.memory, query)
    if not _zero_slot_only(config):
      new_memory = _write_memory(params, config, score, carry.memory, h, valid)
  tapes = (recurrent.write_tapes(params["recurrent"]["lstmn"], carry.tapes, states[0], previous,
                                 valid, cdt)
           if "lstmn" in score.recurrence else carry.tapes)
  new_carry = carry._replace(lstm=tuple(states), memory=new_memory, tapes=tapes)
  return new_carry, (query, context, weights)


def _scan(params, config, score, embedded, lengths, drop, state, need_weights: bool):
  """The reference form: one scan over time carrying the LSTM states and the buffers (from
  `state`, or from zero states and buffers as long as the sequence); the DAS buffer, which
  holds inputs, is cut for each step from the window's inputs (`recurrent.das_sequence`).
  Returns (query, context, weights, the state after the sequence or None)."""
  del need_weights
  num_steps, batch_size, _ = embedded.shape
  gates_x = _first_gates(params, embedded, _compute_dtype(config))
  valid = losses.token_mask(lengths, num_steps).T                              # [T, B]
  step_drop = (drop.between.swapaxes(0, 1), drop.output) if drop is not None else None
  carry = (_initial_state(params, config, score, batch_size, capacity=num_steps)
           if state is None else _with_keys(params, config, score, state))
  step_inputs = (embedded if score.feeds_recurrence else None, gates_x, valid, step_drop)
  das, first, capacity = None, 0, 0
  if "das" in score.recurrence:        # the DAS buffer holds inputs: all known before the scan
    capacity = carry.inputs.states.shape[1]
    das, first = recurrent.das_sequence(params["recurrent"]["das"], carry.inputs, embedded,
                                        valid, fresh=state is None,
                                        compute_dtype=_compute_dtype(config))
    carry = carry._replace(inputs=None)

  def body(carry, inputs):
    last, inputs = inputs
    return _time_step(params, config, score, carry, inputs,
                      None if das is None else (das, last, capacity))

  carry, (query, context, weights) = jax.lax.scan(
      body, carry, (first + jnp.arange(num_steps), step_inputs), unroll=config.unroll)
  if das is not None:
    carry = carry._replace(inputs=memory_lib.window_tail(das.states, das.mask, capacity,
                                                         das.keys))
  batch_major = lambda x: None if x is None else jnp.swapaxes(x, 0, 1)
  return (batch_major(query), batch_major(context), batch_major(weights),
          None if state is None else carry)


def _head(params, config, score, query, context, valid, train, positions):
  """h'_t from the output layer of the score (and new batch-norm statistics in training);
  positions [T]: each step's position in its sentence."""
  head = heads.HEADS[score.head]
  return head.apply(params.get(HEAD), query, context, valid=valid, stats=params.get(STATS),
                    train=train, positions=positions, compute_dtype=_compute_dtype(config),
                    linear=config.get("head_activation", "tanh") == "linear")


def _logits(params, config, features):
  """Softmax logits: h'_t E^T + b, tied (E the embedding) or not (E = params["softmax"]); the
  matmul in the compute dtype, the softmax that follows in float32."""
  weights = params["embed"] if config.tie_embeddings else params["softmax"]
  return nn.dot_transposed(features, weights, _compute_dtype(config)) + params["out_bias"]


def _initial_state(params, config, score, batch_size: int, capacity: int,
                   streaming: bool = False) -> DecodeState:
  """Zero LSTM states and empty buffers; the memory a running mean if `streaming`, else a
  buffer of `capacity` slots (none for the models without attention), the DAS buffer of
  `capacity`, the LSTMN tapes of `config.tape_slots` or `capacity`; every buffer with the keys
  of its zero states (`_with_keys`)."""
  hidden = config.hidden_size
  layers = tuple(lstm.zero_state(batch_size, hidden) for _ in range(config.num_layers))
  if streaming:
    buffer = memory_lib.running_empty(batch_size, hidden, config.zero_slot)
  else:
    buffer = memory_lib.empty(batch_size, capacity if score.attend else 1, hidden,
                              config.zero_slot)
  streams, _ = _input_sizes(config, score)
  inputs = (recurrent.empty_inputs(batch_size, capacity, sum(streams.values()))
            if "das" in score.recurrence else None)
  tapes = (recurrent.empty_tapes(batch_size, config.get("tape_slots", 0) or capacity, hidden,
                                 config.zero_slot)
           if "lstmn" in score.recurrence else None)
  return _with_keys(params, config, score, DecodeState(layers, buffer, inputs, tapes))


def _with_keys(params, config, score, state: DecodeState) -> DecodeState:
  """The state with the cached keys of its buffers (the memory for a score with keys, the DAS
  buffer, the LSTMN h tape) computed from the states they hold, with `params`: those a state
  carried from the previous window holds were computed with the parameters before the
  update in between (training, dynamic evaluation)."""
  cdt = _compute_dtype(config)
  memory = state.memory
  if score.key is not None and isinstance(memory, memory_lib.Memory):
    memory = memory._replace(keys=score.key(params["score"], memory.states, cdt))
  inputs, tapes = (recurrent.with_keys(params["recurrent"], state.inputs, state.tapes, cdt)
                   if score.feeds_recurrence else (state.inputs, state.tapes))
  return state._replace(memory=memory, inputs=inputs, tapes=tapes)


def init_state(params: dict, config, batch_size: int,
               capacity: Optional[int] = None) -> DecodeState:
  """The state before the first token: zero LSTM states and empty buffers.

  capacity: memory slots (default `config.max_len`); past it the memory and the LSTMN tapes
  keep the most recent `capacity - 1` states, the DAS input buffer the last `capacity` inputs
  (`conv1x1` weighs each kept state by its sentence position, as `apply` does).
  `single` and `average` keep an O(1) running mean of the whole history instead of a buffer
  (no window: `capacity` does not bound it).
  """
  validate(config)
  if capacity is not None and capacity < 2:
    raise ConfigError(f"capacity = {capacity}: the memory needs at least 2 slots, the zero "
                      "slot and one state")
  score = scores.get(config.score)
  return _initial_state(params, config, score, batch_size, capacity or config.max_len,
                        streaming=score.streaming)


def init_stream_state(params: dict, config, batch_size: int) -> DecodeState:
  """The state before a stream's first window (`apply_window`) or token (`step`): zero LSTM
  states and a buffer of `config.max_len` slots for every score (the zero slot and the last
  `max_len - 1` states; a buffer, not the running mean, also for `single` and `average`, so
  that `step` and `apply_window` attend over the same window)."""
  validate(config)
  if config.score == "conv1x1":
    raise ConfigError("config.model.score='conv1x1' weights the memory slots by their position "
                      "in a sentence and has no stream form: use config.data.span='sentence'")
  if _zero_slot_only(config):
    raise ConfigError("config.model.memory='zero_slot' emulates the released code's sentence "
                      "rows and has no stream form: use config.data.span='sentence'")
  return _initial_state(params, config, scores.get(config.score), batch_size, config.max_len)


def _position(state: DecodeState) -> jax.Array:
  """The sentence position of the token `step` reads next: the states its buffer has been
  written so far (0 for a running mean, which keeps no count; only the batch-norm head, whose
  score keeps a buffer, reads positions)."""
  if isinstance(state.memory, memory_lib.Memory):
    return state.memory.written
  return jnp.zeros((), jnp.int32)


def step(params: dict, config, state: DecodeState, token: jax.Array,
         tag: Optional[jax.Array] = None):
  """One token [B] (int32) in (and its POS tag [B] with `config.pos_tags`), next-token
  logits [B, V] out; evaluation mode."""
  score = scores.get(config.score)
  embedded = _embed(params, config, token, tag)
  gates_x = _first_gates(params, embedded, _compute_dtype(config))
  valid = jnp.ones(token.shape, bool)
  position = _position(state)
  state, (query, context, _) = _time_step(params, config, score, state,
                                          (embedded, gates_x, valid, None))
  expand = lambda x: None if x is None else x[:, None]
  features, _ = _head(params, config, score, expand(query), expand(context),
                      valid[:, None], train=False, positions=position[None])
  return _logits(params, config, features[:, 0]), state
