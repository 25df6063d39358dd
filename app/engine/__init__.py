"""Engines: build, discover, probe, launch and supervise llama-server / llamafile."""
