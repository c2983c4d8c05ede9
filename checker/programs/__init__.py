"""Programs of several kernel calls: the interpreter's manager across calls, call windows, results."""
