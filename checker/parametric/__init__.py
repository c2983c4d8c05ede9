"""Proofs for every device count N (specs/deciding/parametric.md)."""
