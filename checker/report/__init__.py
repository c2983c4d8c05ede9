"""Reports: JSON, text, concise, GitHub, SARIF, markdown and HTML, and `semcheck spec`."""
