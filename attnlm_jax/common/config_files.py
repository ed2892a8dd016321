"""Config files read as `--config` reads them, for the table runner, notebooks and scripts,
and why the command line's `--config` failed to load, in one line (`load_error`)."""

import re
import runpy
from typing import Mapping, Optional

from absl import flags
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


# What parsing the flags raises for a --config file or override that cannot load.
LOAD_ERRORS = (OSError, flags.Error, SyntaxError, NameError, ImportError, AttributeError,
               KeyError, TypeError, ValueError)
# Python's words for a config override of the wrong type -> what the field expects.
_TYPE_ERRORS = ((r"invalid literal for int\(\) with base 10: (.*)", r"\1 is not an integer"),
                (r"could not convert string to float: (.*)", r"\1 is not a number"),
                (r"\('Non-boolean argument to boolean flag', (.*)\)",
                 r"\1 is not true or false"))


def load_error(error: Exception, argv: list[str]) -> str:
  """One line saying why parsing `argv` failed with `error` (one of LOAD_ERRORS) and how to
  fix it: a missing or unreadable config file, one that raised (its exception's last line,
  not its traceback), one that is not a Python config or has no get_config(), an override of
  the wrong type or of a field the config does not have."""
  if isinstance(error, OSError):
    return f"cannot load {_config_flag(argv)}: {error.__cause__ or error}"
  if isinstance(error, flags.Error):
    message = str(error)
    if "Traceback" in message:
      message = f"{message.split(': ')[0]}: {message.strip().splitlines()[-1]}"
    for pattern, plain in _TYPE_ERRORS:
      message = re.sub(pattern, plain, message)
    return message
  if isinstance(error, (SyntaxError, NameError, ImportError)):
    return (f"cannot read {_config_flag(argv)} as a Python config file "
            f"({type(error).__name__}: {error}): pass one of configs/*.py")
  if isinstance(error, (AttributeError, KeyError)):
    if "get_config" in str(error):
      return f"{_config_flag(argv)} has no get_config(): pass one of configs/*.py"
    return _unknown_config_key(str(error), argv)
  return f"bad --config: {error}"


def _config_flag(argv: list[str]) -> str:
  """The last `--config=FILE` (or `--config FILE`) of `argv`, the one parsed, as --config=FILE."""
  given = [value.partition("=")[2] if value.startswith("--config=") else following
           for value, following in zip(argv[1:], argv[2:] + [""])
           if value.startswith("--config=") or value == "--config"]
  return f"--config={given[-1]}"


def _unknown_config_key(message: str, argv: list[str]) -> str:
  """The error for a --config.A.B override that names no field. `message` is ml_collections':
  the missing field's name in quotes, then 'Did you mean "NEAR"' when one is near."""
  missing, _, hint = message.partition("Did you mean")
  overrides = [a.split("=")[0].removeprefix("--config.").split(".")
               for a in argv[1:] if a.startswith("--config.")]
  for fields in overrides:
    for i, field in enumerate(fields):
      if re.search(rf"\b{re.escape(field)}\b", missing):
        near = re.match(r'\s*"(\w+)"', hint)
        name = "--config." + ".".join(fields)
        if near is None:
          return f"unknown config key {name}: the config file lists the valid keys"
        fix = "--config." + ".".join([*fields[:i], near.group(1), *fields[i + 1:]])
        return f"unknown config key {name}: did you mean {fix}?"
  return f"unknown config key in {' '.join(argv[1:])}: the config file lists the valid keys"
