"""attnlm_jax: attentive LSTM language models in JAX."""
