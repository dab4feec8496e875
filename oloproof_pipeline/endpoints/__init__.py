"""Model endpoints the pipeline calls (below `run/` and `evaluators/`, above `model/`): the
chat-completions client, one limiter per endpoint, and the calling case's deadline."""
