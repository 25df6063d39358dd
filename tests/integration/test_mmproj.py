"""A vision projector (``--mmproj``) on the real engine: planned, measured by pass 1, launched, and
its weights and compute checked against what the engine logged, within 1 MiB; then an image goes
through it.

The CPU build has no GPU, so the plan puts the projector in host RAM and says ``--no-mmproj-offload``;
with a loopback RPC worker as the only device the CLIP backend is that worker's (the first GPU-type
device in ggml's registry, app/planner/memory/projector.py), and the plan puts it there."""

from __future__ import annotations

import base64
import json
import struct
import subprocess
import sys
import urllib.request
import zlib
from pathlib import Path

import pytest

from app.engine.native_build import EngineBuild
from tests.fixtures import gguf_factory, shapes
from tests.fixtures.rpc import rpc_worker
from tests.fixtures.server_proc import headroom_serving

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def mmproj() -> Path:
    return gguf_factory.ensure(shapes.TINY_MMPROJ)


def _rows(lines: list[str]) -> dict[tuple[str, str], list[str]]:
    """Plan-vs-actual rows by (device, part): ``host projector compute 3.41 MiB 3.41 MiB +0.00 MiB ok``."""
    out = {}
    for ln in lines:
        cells = ln.split()
        if len(cells) >= 4 and cells[1] == "projector" and cells[2] in ("weights", "compute"):
            out[(cells[0], f"projector {cells[2]}")] = cells[3:]
    return out


def _png(side: int) -> bytes:
    """A ``side``-square RGB gradient as a PNG (zlib and struct: the stdlib writes it)."""
    raw = b"".join(b"\x00" + bytes(v for x in range(side) for v in (x * 255 // side, y * 255 // side, 128))
                   for y in range(side))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


def test_the_projector_is_planned_measured_launched_and_checked_and_reads_an_image(
        engine_build: EngineBuild, tiny_chat_model: Path, mmproj: Path) -> None:
    plan = subprocess.run([sys.executable, "-m", "app", "plan", str(tiny_chat_model), "-c", "4096",
                           "--mmproj", str(mmproj), "--measure", "--json"], capture_output=True, text=True,
                          timeout=300)
    assert plan.returncode == 0, plan.stdout + plan.stderr
    planned = json.loads(plan.stdout)["projector"]
    assert planned["device"] == "host" and planned["sources"]["compute"] == "measured by pass 1"
    assert planned["weights"] == shapes.TINY_MMPROJ.tensor_bytes and planned["compute"] > 3 * 2**20
    with headroom_serving([str(tiny_chat_model), "-c", "4096", "--mmproj", str(mmproj)]) as (url, lines):
        image = "data:image/png;base64," + base64.b64encode(_png(64)).decode()
        body = {"messages": [{"role": "user", "content": [{"type": "text", "text": "What is this?"},
                                                          {"type": "image_url", "image_url": {"url": image}}]}],
                "max_tokens": 4, "temperature": 0}
        req = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=180) as r:
            reply = json.loads(r.read())
    command = next(ln for ln in lines if ln.startswith("command: "))
    assert f" --mmproj {mmproj} --no-mmproj-offload " in command, command
    rows = _rows(lines)
    assert set(rows) == {("host", "projector weights"), ("host", "projector compute")}, "".join(lines)
    assert all(r[-1] == "ok" for r in rows.values()), "".join(lines)
    assert rows[("host", "projector compute")][0] == f"{planned['compute'] / 2**20:.2f}"
    assert "every buffer within 1 MiB" in "".join(lines)
    # the image became the projector's 576 patch tokens in the prompt (a text-only prompt is a few dozen)
    assert reply["usage"]["prompt_tokens"] > 576, reply


def test_with_a_worker_as_the_only_gpu_the_projector_goes_there(engine_build: EngineBuild,
                                                              tiny_chat_model: Path, mmproj: Path) -> None:
    with rpc_worker() as (endpoint, _), headroom_serving(
            [str(tiny_chat_model), "-c", "4096", "--mmproj", str(mmproj), "--rpc", endpoint,
             "--vram-target", "RPC0=2GiB"]) as (_, lines):
        pass
    text = "".join(lines)
    command = next(ln for ln in lines if ln.startswith("command: "))
    assert f" --mmproj {mmproj} " in command and "--no-mmproj-offload" not in command, command
    rows = _rows(lines)
    devices = {d for d, _ in rows}
    assert len(devices - {"host"}) == 1 and next(iter(devices - {"host"})).startswith("RPC0"), text
    assert all(r[-1] == "ok" for r in rows.values()), text
    assert "every buffer within 1 MiB" in text, text
