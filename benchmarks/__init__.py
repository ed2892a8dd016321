"""Benchmarks of attnlm_jax against a PyTorch peer (documented commands, not tests)."""
