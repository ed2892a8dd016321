"""Config files read as `--config` reads them, for the table runner, notebooks and scripts."""

import runpy
from typing import Mapping, Optional

from etils import epath
import ml_collections

from attnlm_jax.common import errors


def load_config(path, overrides: Optional[Mapping[str, object]] = None
                ) -> ml_collections.ConfigDict:
  """The config of `path`, "configs/NAME.py" or "configs/NAME.py:ARG" (ARG is passed to its
  `get_config`), with `overrides` ({"train.num_epochs": 1}) set as `--config.FIELD=` sets them."""
  path, _, arg = str(path).partition(":")
  if not epath.Path(path).is_file():
    raise errors.ConfigError(f"config file {path} not found: pass configs/NAME.py of the "
                             "repository")
  config = runpy.run_path(path)["get_config"](arg or None)
  config.update_from_flattened_dict(dict(overrides or {}))
  return config
