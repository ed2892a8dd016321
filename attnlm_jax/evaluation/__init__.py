"""Using a trained model: perplexity, scores, samples, interpolation, n-best rescoring, analysis."""
