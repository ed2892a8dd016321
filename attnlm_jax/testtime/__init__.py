"""Test-time memory: the neural cache, dynamic evaluation and their grid searches."""
