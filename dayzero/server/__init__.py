"""The OpenAI-compatible HTTP server: protocol, chat templates, reasoning and tool-call parsing, metrics, and the
process that hosts it beside the engine."""
