"""The properties: their registry, the facts of a program they share (`analysis`), the dispatcher
(`checking`), one module per property, and the verdicts and witnesses they return."""
