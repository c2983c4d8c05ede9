"""Test oracles and bench baselines: independent statements of what semcheck decides, kept outside the
product package (`semcheck`) so that nothing the product ships depends on them. Tests and the bench
import them from a checkout (the repository's root on `sys.path`)."""
