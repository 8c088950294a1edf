"""The wiring: export an engine (or find it in the compilation cache), load it, and build the runtime and the
`LLM` Python API on it."""
