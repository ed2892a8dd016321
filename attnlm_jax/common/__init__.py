"""Errors, JSON, logging and figures: what every part of the package uses."""
