"""Errors, JSON, logging, provenance and figures: what every part of the package uses."""
