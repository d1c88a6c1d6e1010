"""The HTTP adapter (Tornado): decode, call the executor, encode."""
