"""Errors caused by the user's input (configs, files, flags).

Entry points catch `UserError` and print its one-line message instead of a traceback.
"""


class UserError(Exception):
  """A problem with the user's input; the message says what is wrong and how to fix it."""


class ConfigError(UserError, ValueError):
  """An invalid configuration value (an unknown score name, an inconsistent size, ...)."""
