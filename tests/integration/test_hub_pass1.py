"""A Hugging Face repo (the fake Hub, tests/fixtures/fake_hub.py) planned and measured from its header
only, then downloaded into the Hugging Face cache and served — or found there already and served with
the network off — real pass 1 and the real engine on this machine's CPU.

The header-only copy is the promise "before anything loads": pass 1 (no_alloc, LOAD_MODE_NONE) on it
must give the very compute buffers it gives on the whole file, for a tiny fraction of the bytes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from huggingface_hub import hf_hub_download, try_to_load_from_cache

from app.hub.download import download
from app.hub.preview import fetch_header, fetched_bytes
from app.hub.refs import parse_ref
from app.hub.remote import list_ggufs, pick
from app.machine.devices import resolve_gpus
from app.planner.gguf.model import read_shape
from app.planner.settings import LaunchSettings
from app.planner.solve.plan import make_plan
from app.probe.measure import measure
from tests.fixtures import fake_hub as _fake_hub
from tests.fixtures import shapes
from tests.fixtures.fake_hub import FakeHub, write_split

pytestmark = [pytest.mark.engine]
fake_hub = _fake_hub.fake_hub
hf_cache = _fake_hub.hf_cache
ROOT = Path(__file__).resolve().parents[2]
LLAMA, QWEN = "llama-3.1-8b-instruct-q4_k_m", "qwen2.5-14b-instruct-1m-q8_0"


def test_pass1_on_the_header_only_copy_matches_the_whole_file(
        engine_build: object, fake_hub: FakeHub, shape_model: Callable[[str], Path]) -> None:
    original = shape_model(LLAMA)
    fake_hub.add_repo("bartowski/Meta-Llama-3.1-8B-Instruct-GGUF",
                      {"Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf": original, "README.md": original})
    ref = parse_ref("https://huggingface.co/bartowski/Meta-Llama-3.1-8B-Instruct-GGUF")
    gguf = pick(list_ggufs(ref.repo), ref)
    copy = fetch_header(gguf)

    assert fetched_bytes(copy) < gguf.size / 100  # a header, not the weights
    settings = LaunchSettings(n_ctx=32768, n_ubatch=1024, type_k="q8_0", type_v="q8_0")
    from_header, from_file = measure(copy, settings), measure(original, settings)
    assert from_header.devices == from_file.devices  # compute and KV, per device
    assert from_header.kv_total == from_file.kv_total and from_header.devices[0].compute > 0

    inventory = resolve_gpus(["H200"])
    plans = [make_plan(read_shape(p), inventory, settings, measurement=m)
             for p, m in ((copy, from_header), (original, from_file))]
    assert plans[0].to_json() == plans[1].to_json() and plans[0].feasible


def _headroom(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "app", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=180, check=False)


def _env(fake_hub: FakeHub, data: Path) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(ROOT), HF_ENDPOINT=fake_hub.url, HEADROOM_DATA_DIR=str(data),
                PYTHONUNBUFFERED="1")


def _serve(*args: str, env: dict[str, str]) -> str:
    """``headroom serve ARGS`` until it says "serving at", then Ctrl-C: its output (it must exit 0)."""
    proc = subprocess.Popen([sys.executable, "-m", "app", "serve", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, cwd=ROOT, env=env)
    out: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            out.append(line.rstrip())
            if line.startswith("serving at ") or len(out) > 200:
                break
        text = "\n".join(out)
        assert out[-1].startswith("serving at http://127.0.0.1:"), text
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0, rest
    return text


def test_headroom_plan_hf_ref_plans_from_the_header(engine_build: object, fake_hub: FakeHub,
                                                    shape_model: Callable[[str], Path], tmp_path: Path) -> None:
    original = shape_model(QWEN)
    fake_hub.add_repo("Qwen/Qwen2.5-14B-Instruct-1M-GGUF", {
        "Qwen2.5-14B-Instruct-1M-Q8_0.gguf": original, "mmproj-F16.gguf": shape_model(LLAMA)})
    done = _headroom("plan", "hf:Qwen/Qwen2.5-14B-Instruct-1M-GGUF:q8_0", "-c", "128k", "--gpu", "H200", "--json",
                     env=_env(fake_hub, tmp_path))
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    assert plan["header_only"] is True and plan["arch"] == "qwen2" and plan["feasible"] is True
    assert "header of Qwen/Qwen2.5-14B-Instruct-1M-GGUF/Qwen2.5-14B-Instruct-1M-Q8_0.gguf (" in done.stderr
    assert "— planning without downloading" in done.stderr
    assert fake_hub.served("Qwen/Qwen2.5-14B-Instruct-1M-GGUF", "Qwen2.5-14B-Instruct-1M-Q8_0.gguf") \
        < original.stat().st_size / 100
    assert fake_hub.served("Qwen/Qwen2.5-14B-Instruct-1M-GGUF", "mmproj-F16.gguf") == 0

    table = _headroom("plan", "hf:Qwen/Qwen2.5-14B-Instruct-1M-GGUF:Q8_0", "--gpu", "H200", env=_env(fake_hub, tmp_path))
    assert "planned from the header of hf:Qwen/Qwen2.5-14B-Instruct-1M-GGUF/Qwen2.5-14B-Instruct-1M-Q8_0.gguf" \
        in table.stdout.splitlines()[0], table.stdout + table.stderr

    copy = Path(plan["model"])  # the header-only copy: serving it is refused
    assert copy.stat().st_size == original.stat().st_size and copy != original
    refused = _headroom("serve", str(copy), env=_env(fake_hub, tmp_path))
    assert refused.returncode == 2
    assert "header-only preview" in refused.stderr and "download it first" in refused.stderr
    assert "headroom serve hf:Qwen/Qwen2.5-14B-Instruct-1M-GGUF/Qwen2.5-14B-Instruct-1M-Q8_0.gguf" in refused.stderr


def test_headroom_serve_hf_ref_downloads_then_serves(engine_build: object, fake_hub: FakeHub,
                                                    tiny_chat_model: Path, hf_cache: Path, tmp_path: Path) -> None:
    fake_hub.add_repo("acme/Tiny-Chat-GGUF", {"tiny-chat-F32.gguf": tiny_chat_model})
    text = _serve("hf:acme/Tiny-Chat-GGUF", "-c", "4k", "--no-measure", env=_env(fake_hub, tmp_path))
    assert "downloading acme/Tiny-Chat-GGUF/tiny-chat-F32.gguf (" in text and "(100 %)" in text
    local = Path(str(try_to_load_from_cache("acme/Tiny-Chat-GGUF", "tiny-chat-F32.gguf", cache_dir=hf_cache)))
    assert local.read_bytes() == tiny_chat_model.read_bytes()  # in the Hugging Face cache, for every tool
    assert f"-m {local} " in text  # the engine was launched on the downloaded file


def test_a_split_model_is_listed_as_one_previewed_and_downloaded_part_by_part(
        engine_build: object, fake_hub: FakeHub, tmp_path: Path) -> None:
    parts = write_split(shapes.TINY_CHAT, tmp_path / "src", "tiny-chat-Q8_0", max_tensors=12)
    assert len(parts) == 2
    fake_hub.add_repo("acme/Split-GGUF", {f"q8/{p.name}": p for p in parts})
    listing = list_ggufs("acme/Split-GGUF")
    assert len(listing.ggufs) == 1
    gguf = pick(listing, parse_ref("hf:acme/Split-GGUF:Q8_0"))
    assert [p.path for p in gguf.parts] == [f"q8/{p.name}" for p in parts] and gguf.name == "tiny-chat-Q8_0.gguf"

    copy = fetch_header(gguf)
    assert read_shape(copy).files == (copy, copy.with_name(parts[1].name))
    settings = LaunchSettings(n_ctx=4096)
    assert measure(copy, settings).devices == measure(parts[0], settings).devices

    local = download(gguf)
    assert [q.read_bytes() for q in read_shape(local).files] == [p.read_bytes() for p in parts]
    text = _serve(str(local), "-c", "4k", "--no-measure", env=_env(fake_hub, tmp_path))
    assert f"-m {local} " in text  # the cache's link, whose name leads llama.cpp to the second part


def test_headroom_measure_hf_ref_runs_pass1_on_the_header(engine_build: object, fake_hub: FakeHub,
                                                          tiny_chat_model: Path, tmp_path: Path) -> None:
    fake_hub.add_repo("acme/Tiny-Chat-GGUF", {"tiny-chat-F32.gguf": tiny_chat_model})
    done = _headroom("measure", "hf.co/acme/Tiny-Chat-GGUF", "-c", "4k", "--json", "--refresh",
                     env=_env(fake_hub, tmp_path))
    assert done.returncode == 0, done.stderr
    assert "header of acme/Tiny-Chat-GGUF/tiny-chat-F32.gguf (" in done.stderr
    got = json.loads(done.stdout)["measurement"]
    want = json.loads(json.dumps(measure(tiny_chat_model, LaunchSettings(n_ctx=4096)).to_json()))
    assert got["devices"] == want["devices"]
    missing = _headroom("measure", "hf:acme/Nope-GGUF", env=_env(fake_hub, tmp_path))
    assert missing.returncode == 2 and "repository acme/Nope-GGUF not found" in missing.stderr


def test_a_gguf_already_in_the_hf_cache_is_planned_and_served_with_the_network_off(
        engine_build: object, fake_hub: FakeHub, hf_cache: Path, tiny_chat_model: Path, tmp_path: Path) -> None:
    fake_hub.add_repo("acme/Tiny-Chat-GGUF", {"tiny-chat-F32.gguf": tiny_chat_model})
    theirs = Path(hf_hub_download("acme/Tiny-Chat-GGUF", "tiny-chat-F32.gguf", cache_dir=hf_cache,
                                  endpoint=fake_hub.url))  # as `hf download` or llama.cpp's -hf leave it
    asked = len(fake_hub.requests)
    env = _env(fake_hub, tmp_path) | {"HF_HUB_OFFLINE": "1"}  # HF_ENDPOINT still names the running fake Hub
    done = _headroom("plan", "hf:acme/Tiny-Chat-GGUF:F32", "-c", "4k", "--gpu", "H200", "--json", env=env)
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    assert plan["model"] == str(theirs) and plan["header_only"] is False and plan["feasible"] is True
    assert "offline mode (HF_HUB_OFFLINE)" in done.stderr and str(hf_cache) in done.stderr

    text = _serve("hf:acme/Tiny-Chat-GGUF", "-c", "4k", "--no-measure", env=env)
    assert f"-m {theirs} " in text and "downloading" not in text  # launched on the cached file, as it is
    assert len(fake_hub.requests) == asked  # not one request reached the Hub
