"""The project's training step and its LSTM recurrence on a GPU, against cuDNN.

    python -m benchmarks.gpu --out=DIR [--repeats=20] [--parts=step,recurrence,compile]
    python -m benchmarks.gpu --tiny --out=DIR     # every size shrunk: seconds on a CPU

On random batches of PTB's shape (vocabulary 10,001, rows of 35 tokens, fixed seeds), three
parts, each a file of JSON lines in DIR (`command.json` holds the command and the versions):

- step.jsonl: `steps.TrainStep` of `configs/ptb.py:score=none` and `:score=single` (2 x 650)
  against `benchmarks.torch_peer` (`torch.nn.LSTM`, cuDNN on a GPU) on the same device, the
  same parameters and batches, at batch 32 and 256, in float32, TF32 and bfloat16: median
  milliseconds per step (each waited for), tokens/s and the PTB epoch's 900,564 training
  tokens at that rate; at float32 both sides' loss of one batch at the same parameters.
- recurrence.jsonl: microseconds per time step, forward and backward, of `lstm.scan_layer`
  at each `unroll` and of `jax.experimental.rnn.lstm` (cuDNN), at batch 32 and 256.
- compile.jsonl: seconds to compile the `single` step in a fresh process, with XLA's GPU
  autotuner on and off (on a CPU, once).

A side that cannot run here (no torch, a CPU build of torch beside a GPU, no cuDNN LSTM on
this backend) is recorded as `"unavailable": "<reason>"`. benchmarks/README.md ("The GPU step
against cuDNN") says why each part is measured and how to read the lines.
"""

import contextlib
import dataclasses
import functools
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

from absl import app
from absl import flags
from absl import logging
import jax
import jax.numpy as jnp
import numpy as np

from attnlm_jax.common import config_files
from attnlm_jax.common import logging_utils
from attnlm_jax.common import provenance as run_provenance
from attnlm_jax import models
from attnlm_jax.models import losses
from attnlm_jax.models import lstm
from attnlm_jax.models import nn
from attnlm_jax.training import parallel
from attnlm_jax.training import run_config
from attnlm_jax.training import steps
from benchmarks import epoch
from benchmarks import provenance

REPO = pathlib.Path(__file__).resolve().parents[1]
PARTS = ("step", "recurrence", "compile")
SCORES = ("none", "single")
PRECISIONS = ("float32", "tf32", "bfloat16")
UNROLLS = (1, 2, 4, 8, 35)
PTB_EPOCH_TOKENS = 900_564   # Training tokens of a PTB epoch (sentence protocol).
AUTOTUNE_OFF = "--xla_gpu_autotune_level=0"

JAX_PRECISION = {
    "float32": "float32; every model matmul at jax.lax.Precision.HIGHEST "
               "(attnlm_jax.models.nn.PRECISION, the project's default)",
    "tf32": "float32; the model matmuls at jax.lax.Precision.DEFAULT (TF32 on an NVIDIA GPU, "
            "float32 on a CPU): nn.PRECISION patched before the step is traced",
    "bfloat16": "model.compute_dtype=bfloat16: matmul inputs bfloat16, float32 accumulation, "
                "parameters and elementwise math",
}
TORCH_PRECISION = {
    "float32": "float32; torch.backends.cuda.matmul.allow_tf32=False, "
               "torch.backends.cudnn.allow_tf32=False",
    "tf32": "float32; torch.backends.cuda.matmul.allow_tf32=True, "
            "torch.backends.cudnn.allow_tf32=True (TF32 on an NVIDIA GPU, no effect on a CPU)",
    "bfloat16": "torch.autocast(device, dtype=torch.bfloat16) around the forward and the "
                "loss; float32 parameters; allow_tf32 False",
}
RECURRENCE_PRECISION = "float32, jax.lax.Precision.HIGHEST"

FLAGS = flags.FLAGS


def define_flags() -> None:
  """The command line's flags (defined when run as a program)."""
  flags.DEFINE_string("out", None, "Folder for the JSON lines (created).")
  flags.DEFINE_bool("tiny", False, "Shrink every size (a CPU run of seconds, for the tests).")
  flags.DEFINE_integer("repeats", 20, "Timed steps (or calls) per measurement; the median "
                       "counts.")
  flags.DEFINE_list("parts", list(PARTS), f"Which parts to run: {', '.join(PARTS)}.")
  flags.DEFINE_bool("compile_child", False, "(internal) Compile the `single` step in this "
                    "process and print its seconds as one JSON line.")


@dataclasses.dataclass(frozen=True)
class Sizes:
  """The model and batch sizes of a run."""
  vocab_size: int
  hidden_size: int
  num_layers: int
  time_steps: int
  batch_sizes: tuple[int, ...]


FULL = Sizes(vocab_size=10_001, hidden_size=650, num_layers=2, time_steps=35,
             batch_sizes=(32, 256))
TINY = Sizes(vocab_size=101, hidden_size=16, num_layers=2, time_steps=8, batch_sizes=(4,))


def ptb_config(score: str, precision: str, sizes: Sizes, batch_size: int):
  """`configs/ptb.py:score=SCORE` at `sizes` and `batch_size`, completed for training."""
  config = config_files.load_config(f"{REPO / 'configs' / 'ptb.py'}:score={score}")
  config.data.batch_size = batch_size
  config.data.max_len = sizes.time_steps        # The model's memory follows (a reference).
  config.model.hidden_size = sizes.hidden_size
  config.model.num_layers = sizes.num_layers
  config.model.compute_dtype = "bfloat16" if precision == "bfloat16" else "float32"
  return run_config.complete(config, sizes.vocab_size)


def random_batches(sizes: Sizes, batch_size: int, count: int) -> list[dict]:
  """`count` batches of full rows of random word ids (never the pad id 0), fixed seed."""
  rng = np.random.default_rng(0)
  rows = rng.integers(1, sizes.vocab_size, (count, batch_size, sizes.time_steps + 1),
                      dtype=np.int32)
  lengths = np.full((batch_size,), sizes.time_steps, np.int32)
  return [{"inputs": r[:, :-1], "targets": r[:, 1:], "lengths": lengths} for r in rows]


def waited_seconds(calls: list, wait) -> list[float]:
  """Seconds of each call, each timed from `wait()` to `wait()` after it."""
  seconds = []
  for call in calls:
    wait()
    start = time.perf_counter()
    call()
    wait()
    seconds.append(time.perf_counter() - start)
  return seconds


def rates(seconds: list[float], tokens_per_step: int) -> dict:
  """A side's figures from its steps' seconds: median ms, tokens/s, a PTB epoch's seconds."""
  median = statistics.median(seconds)
  tokens_per_s = tokens_per_step / median
  return {"ms_per_step": round(1e3 * median, 3), "tokens_per_s": round(tokens_per_s, 1),
          "epoch_seconds": round(PTB_EPOCH_TOKENS / tokens_per_s, 2)}


@contextlib.contextmanager
def jax_precision(precision: str):
  """The models' matmuls at `precision`'s: for "tf32", `nn.PRECISION` is DEFAULT while the
  context lasts, and JAX's caches are cleared on entry and exit, so that no program traced
  at the other precision is reused (the same model config jits to the same function)."""
  if precision != "tf32":
    yield
    return
  saved, nn.PRECISION = nn.PRECISION, jax.lax.Precision.DEFAULT
  jax.clear_caches()
  try:
    yield
  finally:
    nn.PRECISION = saved
    jax.clear_caches()


def run_jax_step(timer: epoch.StepTimer, placed: list) -> None:
  """One training step of `timer`'s on a placed batch; the state goes on in the timer."""
  timer.state, _ = timer.step(timer.state, placed, timer.rng, timer.lr)


def jax_side(config, params: dict, batches: list, precision: str) -> tuple[dict, dict]:
  """(The JAX step's figures, its parameters after the timed steps): `epoch.StepTimer`
  compiles the step and runs it over the batches once (the warm-up), then each step is
  timed."""
  with jax_precision(precision):
    timer = epoch.StepTimer(config, params, batches)
    seconds = waited_seconds([functools.partial(run_jax_step, timer, b) for b in timer.placed],
                             lambda: jax.block_until_ready(timer.state))
  figures = {"precision": JAX_PRECISION[precision], "devices": len(timer.step.devices),
             **rates(seconds, int(batches[0]["lengths"].sum()))}
  return figures, parallel.first_replica(timer.state.params)


def jax_loss(config, params: dict, batch: dict) -> float:
  """The model's loss of `batch` (summed NLL / rows) at `params`, dropout off."""
  def loss(params, batch):
    logits = models.apply(params, config.model, batch["inputs"], batch["lengths"])
    return losses.loss(logits, batch["targets"], batch["lengths"])
  return float(jax.jit(loss)(params, batch))


def load_torch():
  """(torch, the device the peer runs on) or (None, why it cannot run beside this JAX)."""
  try:
    import torch  # pylint: disable=g-import-not-at-top  (the bench extra)
  except ImportError:
    return None, "torch is not installed (pip install '.[bench]')"
  backend = jax.default_backend()
  if backend == "cpu":
    return torch, "cpu"
  if backend == "gpu" and torch.cuda.is_available():
    return torch, "cuda"
  return None, (f"torch {torch.__version__} has no device of JAX's backend {backend!r} "
                f"(CUDA available: {torch.cuda.is_available()})")


def torch_device_name(torch, device: str) -> str:
  return torch.cuda.get_device_name(0) if device == "cuda" else run_provenance.cpu_model()


@contextlib.contextmanager
def torch_settings(torch, precision: str, device: str):
  """Torch's TF32 switches for `precision` (restored after) and, on CUDA, CUDA as the
  default device: the peer's causal mask and loss make index tensors with `torch.arange`
  and no device."""
  switches = (torch.backends.cuda.matmul, torch.backends.cudnn)
  saved = [s.allow_tf32 for s in switches]
  for switch in switches:
    switch.allow_tf32 = precision == "tf32"
  try:
    with torch.device(device) if device == "cuda" else contextlib.nullcontext():
      yield
  finally:
    for switch, value in zip(switches, saved):
      switch.allow_tf32 = value


def torch_autocast(torch, precision: str, device: str):
  """The context the peer's forward runs in: bfloat16 autocast, or none."""
  if precision == "bfloat16":
    return torch.autocast(device, dtype=torch.bfloat16)
  return contextlib.nullcontext()


def torch_batches(torch, batches: list, device: str) -> list[dict]:
  from benchmarks import torch_peer  # pylint: disable=g-import-not-at-top
  return [{k: v.to(device) for k, v in torch_peer.to_torch(b).items()} for b in batches]


def run_torch_step(torch, loop: epoch.TorchLoop, batch: dict, precision: str,
                   device: str) -> None:
  """One step of the PyTorch user's loop (`torch_peer.train_step`) under `torch_autocast`."""
  from benchmarks import torch_peer  # pylint: disable=g-import-not-at-top
  torch_peer.train_step(loop.model, loop.optimizer, batch, loop.grad_clip,
                        autocast=torch_autocast(torch, precision, device))


def torch_side(torch, device: str, config, params: dict, batches: list,
               precision: str) -> dict:
  """The peer's step figures: one untimed pass over the batches, then each step timed."""
  loop = epoch.TorchLoop(config, params)
  loop.model.to(device).train()
  placed = torch_batches(torch, batches, device)
  wait = torch.cuda.synchronize if device == "cuda" else lambda: None
  with torch_settings(torch, precision, device):
    calls = [functools.partial(run_torch_step, torch, loop, b, precision, device)
             for b in placed]
    waited_seconds(calls, wait)
    seconds = waited_seconds(calls, wait)
  return {"precision": TORCH_PRECISION[precision],
          **rates(seconds, int(batches[0]["lengths"].sum()))}


def torch_loss(torch, device: str, config, params: dict, batch: dict) -> float:
  """The peer's loss of `batch` at `params`, dropout off, at float32."""
  from benchmarks import torch_peer  # pylint: disable=g-import-not-at-top
  loop = epoch.TorchLoop(config, params)
  loop.model.to(device).eval()
  tensors = torch_batches(torch, [batch], device)[0]
  with torch_settings(torch, "float32", device), torch.no_grad():
    logits = loop.model(tensors["inputs"], tensors["lengths"])
    return torch_peer.loss_fn(logits, tensors["targets"], tensors["lengths"]).item()


def loss_check(torch, device: str, config, params: dict, batch: dict) -> dict:
  """Both sides' float32 loss of one batch at the same parameters: the JAX step's after its
  timed steps, not its initial ones (the ids are random, so the loss stays near uniform)."""
  record = {"what": "loss of the first batch, dropout off, at the JAX step's parameters "
                    "after its timed steps", "jax": jax_loss(config, params, batch)}
  if torch is not None:
    record["torch"] = torch_loss(torch, device, config, params, batch)
    record["relative_difference"] = abs(record["torch"] - record["jax"]) / abs(record["jax"])
  return record


def step_record(score: str, batch_size: int, precision: str, sizes: Sizes, repeats: int,
                torch_or_reason) -> dict:
  """One line of the step part: both sides on the same batches from the same parameters."""
  torch, device = torch_or_reason
  config = ptb_config(score, precision, sizes, batch_size)
  params = models.init(jax.random.key(0), config.model)
  batches = random_batches(sizes, batch_size, repeats)
  jax_figures, trained = jax_side(config, params, batches, precision)
  record = {"part": "step", "score": score, "batch_size": batch_size,
            "precision": precision, "sides": {"jax": jax_figures}}
  if torch is None:
    record["sides"]["torch"] = {"precision": TORCH_PRECISION[precision], "unavailable": device}
  else:
    try:
      record["sides"]["torch"] = torch_side(torch, device, config, params, batches, precision)
    except RuntimeError as e:  # No LSTM kernel at this precision here (oneDNN's bfloat16).
      record["sides"]["torch"] = {"precision": TORCH_PRECISION[precision],
                                  "unavailable": f"{' '.join(str(e).split())[:300]}"}
    else:
      record["ratio_jax_over_torch"] = round(
          jax_figures["tokens_per_s"] / record["sides"]["torch"]["tokens_per_s"], 3)
  if precision == "float32":
    record["loss_check"] = loss_check(torch, device, config, trained, batches[0])
  return record


def recurrence_inputs(sizes: Sizes, batch_size: int):
  """Random gates x W_x + b [T, B, 4H] and a recurrent weight W_h [H, 4H] (fixed seed)."""
  rng = np.random.default_rng(1)
  hidden = sizes.hidden_size
  w_h = rng.uniform(-0.05, 0.05, (hidden, 4 * hidden)).astype(np.float32)
  gates_x = rng.normal(0, 1, (sizes.time_steps, batch_size, 4 * hidden)).astype(np.float32)
  return jnp.asarray(w_h), jnp.asarray(gates_x)


def scan_gradient(unroll: int, batch_size: int, hidden: int):
  """jit(grad) of the sum of `lstm.scan_layer`'s outputs, w.r.t. W_h and the gates."""
  def total(w_h, gates_x):
    state = lstm.zero_state(batch_size, hidden)
    return lstm.scan_layer({"w_h": w_h}, gates_x, state, jnp.float32, unroll)[1].sum()
  return jax.jit(jax.grad(total, argnums=(0, 1)))


def cudnn_gradient(batch_size: int, hidden: int, time_steps: int):
  """jit(grad) of the sum of `jax.experimental.rnn.lstm`'s outputs (one layer: its input
  matmul too), w.r.t. its weights and inputs; the arguments it takes."""
  from jax.experimental import rnn  # pylint: disable=g-import-not-at-top
  zeros = jnp.zeros((1, batch_size, hidden), jnp.float32)
  seq_lengths = jnp.full((batch_size,), time_steps, jnp.int32)

  def total(weights, x):
    y, _, _ = rnn.lstm(x, zeros, zeros, weights, seq_lengths, input_size=hidden,
                       hidden_size=hidden, num_layers=1, dropout=0.0, bidirectional=False,
                       precision=jax.lax.Precision.HIGHEST)
    return y.sum()

  weights = rnn.init_lstm_weight(jax.random.key(0), hidden, hidden, 1, False)
  x = jax.random.normal(jax.random.key(1), (batch_size, time_steps, hidden), jnp.float32)
  return jax.jit(jax.grad(total, argnums=(0, 1))), (weights, x)


def time_gradient(gradient, args, repeats: int, time_steps: int) -> dict:
  """Median microseconds per time step (forward and backward) of `gradient(*args)`, after
  one call that compiles."""
  call = lambda: jax.block_until_ready(gradient(*args))
  call()
  seconds = statistics.median(waited_seconds([call] * repeats, lambda: None))
  return {"ms_per_call": round(1e3 * seconds, 4),
          "us_per_time_step": round(1e6 * seconds / time_steps, 2)}


def recurrence_records(sizes: Sizes, batch_size: int, repeats: int) -> list[dict]:
  """The recurrence part's lines at one batch size: the scan at each unroll, then cuDNN."""
  hidden, time_steps = sizes.hidden_size, sizes.time_steps
  base = {"part": "recurrence", "batch_size": batch_size, "precision": RECURRENCE_PRECISION}
  records = []
  for unroll in UNROLLS:
    figures = time_gradient(scan_gradient(unroll, batch_size, hidden),
                            recurrence_inputs(sizes, batch_size), repeats, time_steps)
    records.append({**base, "implementation": "attnlm_jax.models.lstm.scan_layer",
                    "unroll": unroll, **figures})
  record = {**base, "implementation": "jax.experimental.rnn.lstm", "unroll": None,
            "includes_input_matmul": True}
  try:
    gradient, args = cudnn_gradient(batch_size, hidden, time_steps)
    record.update(time_gradient(gradient, args, repeats, time_steps))
  except Exception as e:  # pylint: disable=broad-except  (no cuDNN LSTM on this backend)
    record["unavailable"] = f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"
  records.append(record)
  return records


def compile_seconds(sizes: Sizes) -> dict:
  """Seconds to compile the `single` training step at the first batch size in this process
  (the gradients program, as the training loop compiles it before its first step), and of
  the first step after it (which compiles the pmapped update)."""
  config = ptb_config("single", "float32", sizes, sizes.batch_sizes[0])
  params = models.init(jax.random.key(0), config.model)
  state = steps.initial_state(config, params)
  train_step = steps.TrainStep(config)
  p_state = train_step.initial_state(state["params"], state["opt_state"], 0)
  rng = parallel.replicate(state["rng"])
  batch = random_batches(sizes, sizes.batch_sizes[0], 1)[0]
  start = time.perf_counter()
  for compile_one in train_step.compilations(p_state, rng, batch, [sizes.time_steps]):
    compile_one()
  compiled = time.perf_counter() - start
  lr = parallel.replicate(np.float32(config.train.learning_rate))
  start = time.perf_counter()
  jax.block_until_ready(train_step(p_state, train_step.place(batch), rng, lr)[0])
  return {"compile_seconds": round(compiled, 2),
          "first_step_seconds": round(time.perf_counter() - start, 2)}


def child_xla_flags(autotune: bool) -> str:
  """This process's XLA_FLAGS without an autotune level, plus AUTOTUNE_OFF when off."""
  kept = [f for f in os.environ.get("XLA_FLAGS", "").split()
          if not f.startswith("--xla_gpu_autotune_level")]
  return " ".join(kept + ([] if autotune else [AUTOTUNE_OFF]))


def compile_in_child(autotune: bool, tiny: bool) -> dict:
  """`compile_seconds` in a fresh process: no persistent compilation cache, no GPU memory
  preallocated (this process holds its share)."""
  env = {**os.environ, "XLA_FLAGS": child_xla_flags(autotune),
         "JAX_ENABLE_COMPILATION_CACHE": "false", "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
  env.pop("JAX_COMPILATION_CACHE_DIR", None)
  command = [sys.executable, "-m", "benchmarks.gpu", "--compile_child",
             *(["--tiny"] if tiny else [])]
  run = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, check=False)
  if run.returncode:
    raise RuntimeError(f"the compile child failed: {run.stderr.strip()[-2000:]}")
  return {"xla_flags": env["XLA_FLAGS"], **json.loads(run.stdout.strip().splitlines()[-1])}


def compile_records(sizes: Sizes, tiny: bool) -> list[dict]:
  """The compile part: autotuner on and off on a GPU; once on a CPU (no autotuner)."""
  base = {"part": "compile", "score": "single", "batch_size": sizes.batch_sizes[0],
          "precision": JAX_PRECISION["float32"]}
  if jax.default_backend() != "gpu":
    return [{**base, "autotuner": f"irrelevant on {jax.default_backend()}: compiled once",
             **compile_in_child(True, tiny)}]
  return [{**base, "autotuner": "on" if autotune else "off", **compile_in_child(autotune, tiny)}
          for autotune in (True, False)]


def versions(torch) -> dict:
  import jaxlib.version  # pylint: disable=g-import-not-at-top
  result = {"jax": jax.__version__, "jaxlib": jaxlib.version.__version__}
  if torch is not None:
    result.update(torch=torch.__version__, torch_cuda=torch.version.cuda,
                  torch_cudnn=torch.backends.cudnn.version())
  return result


def provenance_fields(sizes: Sizes, torch_or_reason, repeats: int) -> dict:
  """What every line carries: sizes, devices, versions, XLA_FLAGS and the command."""
  torch, device = torch_or_reason
  return {"sizes": dataclasses.asdict(sizes), "repeats": repeats,
          "device": {"jax": jax.devices()[0].device_kind,
                     "torch": torch_device_name(torch, device) if torch else None},
          "versions": versions(torch), "xla_flags": os.environ.get("XLA_FLAGS"),
          **provenance.machine_and_command("benchmarks.gpu")}


def part_records(part: str, sizes: Sizes, repeats: int, torch_or_reason, tiny: bool):
  """The records of one part, one at a time."""
  if part == "step":
    for batch_size in sizes.batch_sizes:
      for score in SCORES:
        for precision in PRECISIONS:
          yield step_record(score, batch_size, precision, sizes, repeats, torch_or_reason)
  elif part == "recurrence":
    for batch_size in sizes.batch_sizes:
      yield from recurrence_records(sizes, batch_size, repeats)
  else:
    yield from compile_records(sizes, tiny)


def run(out: pathlib.Path, parts: list[str], sizes: Sizes, repeats: int, tiny: bool) -> None:
  """Writes command.json and each part's lines (each line as soon as it is measured)."""
  started = time.perf_counter()
  torch_or_reason = load_torch()
  common = provenance_fields(sizes, torch_or_reason, repeats)
  out.mkdir(parents=True, exist_ok=True)
  header = {key: common[key] for key in ("command", "xla_flags", "versions", "device",
                                         "platform", "cpu_model", "host_cpus")}
  (out / "command.json").write_text(json.dumps({**header, "parts": parts}) + "\n")
  for part in parts:
    with open(out / f"{part}.jsonl", "w", encoding="utf-8") as lines:
      for record in part_records(part, sizes, repeats, torch_or_reason, tiny):
        line = json.dumps({**record, **common})
        lines.write(line + "\n")
        lines.flush()
        print(line, flush=True)
  (out / "command.json").write_text(json.dumps(
      {**header, "parts": parts, "seconds": round(time.perf_counter() - started, 1)}) + "\n")


def main(argv: list[str]) -> None:
  if len(argv) > 1:
    sys.exit(f"error: unexpected arguments: {' '.join(argv[1:])}")
  logging_utils.quiet_libraries()
  logging.set_verbosity(logging.WARNING)
  sizes = TINY if FLAGS.tiny else FULL
  if FLAGS.compile_child:
    print(json.dumps(compile_seconds(sizes)))
    return
  unknown = [part for part in FLAGS.parts if part not in PARTS]
  if unknown or FLAGS.out is None or FLAGS.repeats < 1:
    sys.exit(f"error: --out=DIR is required, --repeats at least 1, and --parts from "
             f"{', '.join(PARTS)} (unknown: {', '.join(unknown) or 'none'})")
  run(pathlib.Path(FLAGS.out), FLAGS.parts, sizes, FLAGS.repeats, FLAGS.tiny)


if __name__ == "__main__":
  define_flags()
  app.run(main)
