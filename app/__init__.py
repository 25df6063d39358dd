"""Headroom: see how a GGUF model and its context fit your GPUs, then serve it."""

__version__ = "0.1.0"
