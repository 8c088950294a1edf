"""Answers held to a grammar: JSON objects, JSON schemas and their regex patterns, tool calls held to the offered
functions; each step's token masks come from an xgrammar matcher over the vocabulary compiled once an engine."""
