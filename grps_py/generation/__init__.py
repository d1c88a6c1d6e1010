"""Generative models (token by token) and their continuous batching (issue 23, in progress)."""
