"""Data parallelism: arrays stacked over the devices for `jax.pmap`, each device's view of them
for the per-device programs (`device_views`, `stack_views`), and batches sent ahead of use
(`prefetch`)."""

import collections
import itertools
from typing import Any, Callable, Iterable, Iterator, Sequence

import jax
import numpy as np

from attnlm_jax.data.vocab import PAD_ID

AXIS = "batch"
# Batches on their way to the devices while a step runs.
PREFETCH = 2


def stacked_sharding(devices) -> jax.sharding.NamedSharding:
  """Arrays [len(devices), ...] with entry i on devices[i]: the layout pmap takes, and the
  very sharding its outputs have (the mesh axis named as pmap's `AXIS`), so a program
  compiled for arrays laid out here serves the pmapped steps' outputs too."""
  mesh = jax.sharding.Mesh(np.array(devices), (AXIS,))
  return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(AXIS))


def replicate(tree, devices=None):
  """Copies every leaf to each local device (or `devices`), laid out as pmap expects.

  Unlike `flax.jax_utils.replicate` this stacks on the host, so no computation is compiled
  per leaf shape.
  """
  devices = devices or jax.local_devices()
  sharding = stacked_sharding(devices)
  return jax.tree.map(
      lambda x: jax.device_put(np.stack([np.asarray(x)] * len(devices)), sharding), tree)


def first_replica(tree):
  """The first device's copy of a pmapped tree, as host arrays (no device computation)."""
  return jax.tree.map(lambda x: np.array(np.asarray(x.addressable_data(0))[0]), tree)


def device_views(tree, index: int):
  """Local device `index`'s entries of a stacked tree: arrays [1, ...] on that device (no
  copy)."""
  return jax.tree.map(lambda x: x.addressable_data(index), tree)


def stack_views(views: Sequence[Any], devices) -> Any:
  """The stacked tree [devices, ...] made of one tree of [1, ...] arrays per device (no
  copy); the inverse of `device_views` over all local devices."""
  sharding = stacked_sharding(devices)
  return jax.tree.map(
      lambda *xs: jax.make_array_from_single_device_arrays(
          (len(xs), *xs[0].shape[1:]), sharding, list(xs)), *views)


def global_index(local_index: int) -> int:
  """The index in the global device list (pmap's order) of local device `local_index`."""
  return jax.process_index() * jax.local_device_count() + local_index


def pad_time(batch: dict, time_multiple: int) -> dict:
  """The batch with its [rows, T] arrays padded with PAD_ID to a multiple of `time_multiple`
  positions (to bound the number of shapes a jitted step compiles for)."""
  steps = batch["inputs"].shape[1]
  pad = -steps % time_multiple
  if not pad:
    return batch
  return {key: np.pad(value, ((0, 0), (0, pad)), constant_values=PAD_ID)
          if value.ndim == 2 else value for key, value in batch.items()}


def shard_batch(batch: dict, time_multiple: int = 1) -> dict:
  """This process's rows of a global batch, reshaped to [local devices, rows, ...] (the time
  axis padded to a multiple of `time_multiple`, see `pad_time`).

  Args:
    batch: {"inputs", "targets", "lengths", ...} numpy arrays of the rows this process
      reads (all rows with one process; see `LMData.train_iterator`).
    time_multiple: see `pad_time`.
  """
  devices = jax.local_device_count()
  batch = pad_time(batch, time_multiple)
  return {key: value.reshape(devices, value.shape[0] // devices, *value.shape[1:])
          for key, value in batch.items()}


def put_sharded(batch: dict) -> dict:
  """`shard_batch`ed host arrays sent to the local devices in pmap's layout (asynchronous)."""
  return jax.device_put(batch, stacked_sharding(jax.local_devices()))


def prefetch(items: Iterable[tuple[Any, Any]], place: Callable[[Any], Any],
             size: int = PREFETCH) -> Iterator[tuple[Any, Any]]:
  """(place(batch), tag) pairs, `size` batches placed on the devices ahead of use.

  `place` starts the (asynchronous) copy, so it overlaps the running step. The tag passes
  through unchanged: the training loop tags each batch with the data iterator's position
  after it, which is what a checkpoint after that batch must hold.
  """
  items = iter(items)
  queue = collections.deque()

  def enqueue(count: int) -> None:
    for batch, tag in itertools.islice(items, count):
      queue.append((place(batch), tag))

  enqueue(size)
  while queue:
    yield queue.popleft()
    enqueue(1)
