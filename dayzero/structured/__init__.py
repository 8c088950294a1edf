"""Answers held to a grammar: JSON objects, JSON schemas and their regex patterns, tool calls held to the offered
functions; each step's token masks come from a byte-level recognizer walked over the vocabulary."""
