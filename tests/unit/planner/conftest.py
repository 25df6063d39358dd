"""Shapes the planner tests share (read once per session; read_shape caches by file identity)."""

from __future__ import annotations

import pytest

from app.planner.gguf.model import ModelShape, read_shape
from tests.fixtures import gguf_factory, shapes


@pytest.fixture(scope="session")
def qwen14b() -> ModelShape:
    """Qwen2.5-14B-Instruct-1M's shape: the model of the recorded H200 log."""
    return read_shape(gguf_factory.ensure(shapes.QWEN25_14B_1M))
