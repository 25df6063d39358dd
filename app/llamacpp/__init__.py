"""llama.cpp's words, in one place: every log line Headroom reads (``logs``: buffer sizes, the KV cache,
the memory breakdown, ``system_info``, the opencoti engine's state) and every failure rule (``failures``:
why an engine or pass 1 stopped, what a capability probe's answer means), each pattern beside the
sample line it matches. Pure text in, records out: it imports nothing else of Headroom's, so the
planner, pass 1, the engine check and the CLI all read llama.cpp through it (docs/architecture.md, "Layout")."""
