"""Every shape-only fixture passes the engine's own no_alloc load (``llama-fit-params -fitp on``),
without the engine reading the sparse data region."""

from __future__ import annotations

import re
import subprocess

import pytest

from app.engine.native_build import EngineBuild
from app.planner.units import MiB
from tests.fixtures import gguf_factory, pagecache, shapes
from tests.fixtures.spec import ModelSpec

pytestmark = pytest.mark.engine

#: ``common_fit_print``: one ``<device> <model> <context> <compute>`` line (MiB) per device, then
#: ``Host ...``; on this CPU-only build only the Host line. Example: ``Host 14968 768 317``.
_DEVICE_LINE = re.compile(r"^(\S+) (\d+) (\d+) (\d+)\s*$", re.MULTILINE)
#: Far below any shape's size, above its header (a 262k-token vocab is ~6 MiB).
_MAX_RESIDENT = 64 * MiB


def fit_print_argv(build: EngineBuild, model: str, n_ctx: int) -> list[str]:
    # --no-repack: the CPU backend would otherwise move q4_K weights into a CPU_REPACK buffer
    # that the Host line does not count (common_memory_breakdown_print lists it separately).
    return [str(build.fit_params), "-fitp", "on", "-m", model, "-c", str(n_ctx), "--no-repack"]


@pytest.mark.parametrize("spec", [*shapes.SHAPES, shapes.TINY, shapes.TINY_GLM5_NEXT], ids=lambda s: s.name)
def test_engine_no_alloc_load_accepts_the_model(engine_build: EngineBuild, spec: ModelSpec) -> None:
    path = gguf_factory.ensure(spec)
    pagecache.drop(path)
    # Another session may be serving this very file (its pages stay): compare, don't assume zero.
    resident_before = pagecache.resident_bytes(path)
    proc = subprocess.run(
        fit_print_argv(engine_build, str(path), 8192), capture_output=True, text=True, errors="replace", timeout=60,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    devices = {m[0]: tuple(int(x) for x in m[1:]) for m in _DEVICE_LINE.findall(proc.stdout)}
    assert "Host" in devices, f"no per-device lines in:\n{proc.stdout}\n{proc.stderr[-2000:]}"
    model_mib = sum(d[0] for d in devices.values())
    assert abs(model_mib - spec.tensor_bytes / MiB) <= 1, (devices, spec.tensor_bytes / MiB)
    assert all(d[1] > 0 and d[2] > 0 for d in devices.values()), "context and compute must be sized"
    read_in = pagecache.resident_bytes(path) - resident_before
    assert read_in < _MAX_RESIDENT, f"no_alloc read {read_in / MiB:.0f} MiB of a sparse file's weights"


def test_iswa_window_is_smaller_than_a_full_cache(engine_build: EngineBuild) -> None:
    """Gemma 3's 40 sliding-window layers cache 1024 positions, not n_ctx: the context column
    grows by far less than 48 full layers would when n_ctx quadruples."""
    path = str(gguf_factory.ensure(shapes.GEMMA3_12B))
    ctx_mib = []
    for n_ctx in (8192, 32768):
        out = subprocess.run(fit_print_argv(engine_build, path, n_ctx), capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr[-3000:]
        ctx_mib.append(int(_DEVICE_LINE.findall(out.stdout)[0][2]))
    # f16 K+V per position per layer: 2 * 8 heads * 256 * 2 bytes = 8 KiB
    full_growth = 48 * (32768 - 8192) * 8192 / MiB
    global_growth = 8 * (32768 - 8192) * 8192 / MiB
    assert ctx_mib[1] - ctx_mib[0] == pytest.approx(global_growth, rel=0.05)
    assert ctx_mib[1] - ctx_mib[0] < full_growth / 2
