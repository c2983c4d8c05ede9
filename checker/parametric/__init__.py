"""Proofs for every device count N (specs/parametric.md)."""
