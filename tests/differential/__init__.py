"""Differential tests: the reference model against jax's interpret-mode manager."""
