"""CLI tests: `semcheck verify` driven as a subprocess, reports, isolation, the pytest plugin."""
