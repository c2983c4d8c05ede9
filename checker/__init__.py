"""semcheck.checker: jax front end, Z3 encodings, reports and the CLI."""
