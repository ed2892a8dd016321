"""A PyTorch eager implementation of the output-attention LSTM language models.

The same function as `attnlm_jax.models` for the scores in `SCORES`, written the way a
PyTorch user would write it: `nn.LSTM`, the attention of every step at once over the shifted
outputs [0, h_1 .. h_{T-1}] with the causal mask of `attnlm_jax/models/memory.py`, the merge layer
h'_t = tanh(W_h h_t + W_c c_t + b_c), the tied softmax, the loss sum of masked token NLL /
batch size, the gradient clipped at global norm 5 and plain SGD. `load_jax_params` copies a
JAX params pytree in, so `tests/benchmarks/test_torch_peer.py` can check that both compute
the same loss and gradients and the throughput benchmark compares the same computation.
"""

import contextlib

import numpy as np
import torch
from torch import nn
import torch.nn.functional as F

SCORES = ("none", "proj", "single", "combined", "average")


class PeerError(ValueError):
  """A model the peer does not implement."""


class AttentiveLM(nn.Module):
  """Embedding E [V, H] tied to the softmax, `num_layers` x nn.LSTM, optional attention.

  Parameter layouts follow `attnlm_jax.models` (x @ W), except nn.LSTM's own weights.
  """

  def __init__(self, vocab_size: int, hidden_size: int, num_layers: int, score: str,
               dropout: float = 0.0, zero_slot: bool = True):
    super().__init__()
    if score not in SCORES:
      raise PeerError(f"the torch peer has no score {score!r}; use one of: {', '.join(SCORES)}")
    self.score = score
    self.zero_slot = zero_slot
    self.dropout = dropout
    h = hidden_size
    self.embed = nn.Parameter(torch.empty(vocab_size, h))
    self.out_bias = nn.Parameter(torch.zeros(vocab_size))
    self.lstm = nn.LSTM(h, h, num_layers, batch_first=True, dropout=dropout)
    if score in ("single", "combined"):
      self.w_s = nn.Parameter(torch.empty(h, h))
      self.v = nn.Parameter(torch.empty(h))
    if score == "combined":
      self.w_q = nn.Parameter(torch.empty(h, h))
    if score != "none":
      self.head_w_h = nn.Parameter(torch.empty(h, h))
      self.head_b = nn.Parameter(torch.zeros(h))
    if score in ("single", "combined", "average"):
      self.head_w_c = nn.Parameter(torch.empty(h, h))
    for name, param in self.named_parameters():   # the papers' U(-0.05, 0.05), biases 0
      if "bias" in name or name == "head_b":
        nn.init.zeros_(param)
      else:
        nn.init.uniform_(param, -0.05, 0.05)
    for depth in range(num_layers):   # one gate bias, as in the JAX LSTM: b_hh stays 0
      getattr(self.lstm, f"bias_hh_l{depth}").requires_grad_(False)

  def forward(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Logits [B, T, V] for tokens [B, T] (int64) and lengths [B]; every row from the zero
    state (the sentence protocol)."""
    return self.window(tokens, lengths, None)[0]

  def window(self, tokens: torch.Tensor, lengths: torch.Tensor, state=None):
    """(logits [B, T, V], nn.LSTM's (h, c) after the window) from `state` (None: zeros): one
    window of the stream protocol, as pytorch/examples' word_language_model trains (only
    `none`; the attentive scores' memory does not cross windows here)."""
    if state is not None and self.score != "none":
      raise PeerError(f"the torch peer carries no memory across windows for score "
                      f"{self.score!r}: use score 'none' under the stream protocol")
    drop = lambda x: F.dropout(x, self.dropout, self.training)
    outputs, state = self.lstm(drop(F.embedding(tokens, self.embed)), state)  # [B, T, H]
    query = drop(outputs)
    if self.score == "none":
      features = query
    elif self.score == "proj":
      features = torch.tanh(query @ self.head_w_h + self.head_b)
    else:
      context = self._attend(query, outputs, lengths)
      features = torch.tanh(query @ self.head_w_h + context @ self.head_w_c + self.head_b)
    return features @ self.embed.t() + self.out_bias, state

  def _attend(self, query, outputs, lengths):
    """c_t over the memory [0, h_1 .. h_{T-1}] (Salton et al. 2017 eqs. 9-10; 2018 eq. 10)."""
    memory = F.pad(outputs[:, :-1], (0, 0, 1, 0))                         # [B, L=T, H]
    mask = causal_mask(lengths, outputs.shape[1], self.zero_slot)         # [B, T, L]
    if self.score == "average":
      weights = mask.float() / mask.float().sum(-1, keepdim=True).clamp_min(1.0)
    else:
      keys = memory @ self.w_s                                            # [B, L, H]
      if self.score == "single":
        scores = (torch.tanh(keys) @ self.v)[:, None, :]                  # [B, 1, L]
      else:
        queries = query @ self.w_q                                        # [B, T, H]
        scores = torch.tanh(keys[:, None] + queries[:, :, None]) @ self.v  # [B, T, L]
      scores = scores.masked_fill(~mask, -1e9)
      weights = torch.softmax(scores, dim=-1) * mask
    return weights @ memory


def causal_mask(lengths: torch.Tensor, num_steps: int, zero_slot: bool) -> torch.Tensor:
  """Slot s is visible to step t iff 1 <= s <= t and s <= length (slot 0 iff zero_slot)."""
  step = torch.arange(num_steps)[:, None]
  slot = torch.arange(num_steps)[None, :]
  visible = (slot >= 1) & (slot <= step)
  if zero_slot:
    visible = visible | (slot == 0)
  real = (slot[None] <= lengths[:, None, None]) | (slot[None] == 0)
  return visible[None] & real


def loss_fn(logits: torch.Tensor, targets: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
  """Sum of the masked token NLL divided by the batch size (the papers' loss)."""
  mask = torch.arange(targets.shape[1])[None, :] < lengths[:, None]
  nll = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none")
  return (nll * mask.flatten()).sum() / targets.shape[0]


def train_step(model: AttentiveLM, optimizer: torch.optim.Optimizer, batch: dict,
               grad_clip: float = 5.0, state=None, autocast=None):
  """One step of the PyTorch user's loop: forward (under `autocast`, a context such as
  `torch.autocast`; None: none) from `state` (nn.LSTM's (h, c); None: zeros), backward, clip
  at global norm `grad_clip`, SGD update. Returns (loss, the state after the window), both
  detached: pass the state to the next step under the stream protocol."""
  model.train()
  optimizer.zero_grad(set_to_none=True)
  with autocast or contextlib.nullcontext():
    logits, state = model.window(batch["inputs"], batch["lengths"], state)
    loss = loss_fn(logits, batch["targets"], batch["lengths"])
  loss.backward()
  torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
  optimizer.step()
  return loss.detach(), (state[0].detach(), state[1].detach())


def eval_step(model: AttentiveLM, batch: dict, state=None):
  """(summed token NLL of one batch, the state after it) without dropout or gradients."""
  model.eval()
  with torch.inference_mode():
    logits, state = model.window(batch["inputs"], batch["lengths"], state)
    return loss_fn(logits, batch["targets"], batch["lengths"]) * batch["targets"].shape[0], state


def to_torch(batch: dict) -> dict:
  """A batch of numpy arrays (docs/data.md) as torch int64 tensors."""
  return {key: torch.from_numpy(np.asarray(value, dtype=np.int64)) for key, value in batch.items()}


def load_jax_params(model: AttentiveLM, params: dict) -> None:
  """Copies an `attnlm_jax.models` params pytree into the peer.

  nn.LSTM keeps W_ih [4H, D] and W_hh [4H, H] (transposes of w_x, w_h, the same gate order
  i, f, g, o) and two biases: b_ih = b, and b_hh = 0 (frozen, so that clipping and SGD see
  one bias, as in the JAX model).
  """
  t = lambda x: torch.from_numpy(np.array(x, dtype=np.float32))
  tensors = {"embed": t(params["embed"]), "out_bias": t(params["out_bias"])}
  for depth, layer in enumerate(params["lstm"]):
    tensors[f"lstm.weight_ih_l{depth}"] = t(layer["w_x"]).t()
    tensors[f"lstm.weight_hh_l{depth}"] = t(layer["w_h"]).t()
    tensors[f"lstm.bias_ih_l{depth}"] = t(layer["b"])
    tensors[f"lstm.bias_hh_l{depth}"] = torch.zeros_like(t(layer["b"]))
  for name, value in params.get("score", {}).items():
    tensors[name] = t(value)
  for name, value in params.get("head", {}).items():
    tensors["head_" + name] = t(value)
  mismatch = set(dict(model.named_parameters())) ^ set(tensors)
  if mismatch:
    raise PeerError(f"JAX params and the peer differ in {sorted(mismatch)}: build the peer "
                    "with the JAX config's score and sizes")
  with torch.no_grad():
    for name, param in model.named_parameters():
      param.copy_(tensors[name])
