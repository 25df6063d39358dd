"""Shared-sequence sessions on a running llama-server: a client, forks that share one prompt,
the proof that sharing happened, a smoke test, and the known engine issues (docs/domain.md §1, §5)."""
