"""Where the clone of the repository that `attnlm_jax` is imported from lies."""

import pathlib

# The directory above the attnlm_jax package: a clone's root, with configs/, docs/ and
# benchmarks/ (an installed package has none of them beside it).
REPOSITORY = pathlib.Path(__file__).resolve().parents[2]
