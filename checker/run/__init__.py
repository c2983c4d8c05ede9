"""The run layer: the CLI, requests and their planning, child processes and the warm start."""
