"""Measurements are reused only for the same file, the same launch and the same llama.cpp."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from app.engine.native_build import EngineBuild
from app.planner.measurement import DeviceMeasurement, MeasuredBy, Measurement, MeasurementSource
from app.planner.settings import LaunchSettings
from app.planner.units import MiB
from app.probe.cache import MeasureCache, cache_key, library_identity
from app.probe.measure import measure_cached


def _m(compute: int) -> Measurement:
    return Measurement((DeviceMeasurement("CPU", compute, 0, True),), "CPU", "abc", 0.1)


@pytest.fixture
def model(tmp_path: Path, tiny_model: Path) -> Path:
    copy = tmp_path / "model.gguf"
    shutil.copyfile(tiny_model, copy)
    return copy


def test_every_part_of_the_key_matters(model: Path, tmp_path: Path) -> None:
    lib = library_identity(None, "0c1e57098")
    base = cache_key(model, LaunchSettings(), lib)
    assert cache_key(model, LaunchSettings(), lib) == base
    for field, value in LaunchSettings().to_json().items():
        changed: object
        if isinstance(value, bool):
            changed = not value
        elif value is None:  # cache_ram_mib: auto, or a size
            changed = 512
        elif isinstance(value, int):
            changed = value + 1
        elif field == "rpc":
            changed = ("127.0.0.1:50052",)
        elif field == "tensor_split":
            changed = (1, 2)
        elif field == "tensor_overrides":
            changed = ((r"blk\.0\.", "CPU"),)
        elif field == "lora":
            changed = (str(tmp_path / "adapter.gguf"),)
        elif field == "draft_model":
            changed = str(model)  # a file: the draft's identity is part of the key too
        else:
            changed = "bf16" if "type_" in field else "off"
        assert cache_key(model, LaunchSettings().with_(**{field: changed}), lib) != base, field
    assert cache_key(model, LaunchSettings(), library_identity(None, "43fe9c642")) != base
    assert cache_key(model, LaunchSettings(), lib, method="fit-params") != base
    drafted = cache_key(model, LaunchSettings(draft_model=str(model)), lib)
    os.utime(model, ns=(2, 2))  # (the model is its own draft here: both identities change)
    assert cache_key(model, LaunchSettings(draft_model=str(model)), lib) != drafted
    os.utime(model, ns=(1, 1))
    assert cache_key(model, LaunchSettings(), lib) != base


def test_a_changed_file_is_measured_again(model: Path, tmp_path: Path) -> None:
    store = MeasureCache(tmp_path / "m")
    lib = library_identity(None, "c")
    calls: list[int] = []

    def run() -> Measurement:
        calls.append(1)
        return _m(len(calls) * MiB)

    from app.probe.cache import cached

    first, hit1 = cached(model, LaunchSettings(), lib, run, cache=store)
    again, hit2 = cached(model, LaunchSettings(), lib, run, cache=store)
    assert (hit1, hit2, again) == (False, True, first)
    with open(model, "r+b") as f:  # same size, new header bytes and mtime
        f.seek(100)
        f.write(b"\xff")
    third, hit3 = cached(model, LaunchSettings(), lib, run, cache=store)
    assert not hit3 and third.devices[0].compute == 2 * MiB


def test_a_corrupt_entry_counts_as_missing(model: Path, tmp_path: Path) -> None:
    store = MeasureCache(tmp_path / "m")
    key = cache_key(model, LaunchSettings(), library_identity(None, "c"))
    store.put(key, _m(MiB), model=model, settings=LaunchSettings())
    assert store.get(key) == _m(MiB)
    (store.root / f"{key}.json").write_text("{not json")
    assert store.get(key) is None


def test_measure_cached_runs_the_probe_once(engine_build: EngineBuild, model: Path, tmp_path: Path) -> None:
    store = MeasureCache(tmp_path / "m")
    first, hit1 = measure_cached(model, LaunchSettings(n_ctx=4096), cache=store)
    second, hit2 = measure_cached(model, LaunchSettings(n_ctx=4096), cache=store)
    assert (hit1, hit2) == (False, True)
    assert second == first and first.llama_commit == engine_build.commit
    _, hit3 = measure_cached(model, LaunchSettings(n_ctx=4096), cache=store, refresh=True)
    assert not hit3


@pytest.mark.parametrize(("words", "kind", "detail"), [
    ("llama-cpp-python no_alloc probe", MeasuredBy.PROBE, "llama-cpp-python"),
    ("the engine build's libllama (cuda): llama-fit-params' no_alloc load with llama-server's context "
     "parameters", MeasuredBy.FIT_PARAMS, "cuda"),
    ("the engine's own two-pass measurement (opencoti window mode)", MeasuredBy.OPENCOTI, ""),
    ("llama-server log", MeasuredBy.LOG, "llama-server log"),
])
def test_a_stored_pass_1_keeps_who_measured_it(model: Path, tmp_path: Path, words: str, kind: MeasuredBy,
                                               detail: str) -> None:
    # An entry a Headroom before the typed source wrote (the source as words): read back with its kind,
    # and `headroom plan` / `measure` print the same words.
    store = MeasureCache(tmp_path / "m")
    key = cache_key(model, LaunchSettings(), library_identity(None, "c"))
    old = {"devices": [{"name": "CPU", "compute": MiB, "kv": 0, "host": True}], "backend": "CPU",
           "llama_commit": "abc", "seconds": 0.1, "source": words}
    store.root.mkdir(parents=True)
    (store.root / f"{key}.json").write_text(json.dumps({"model": str(model), "measurement": old}))
    got = store.get(key)
    assert got is not None and got.source == MeasurementSource(kind, detail)
    assert str(got.source) == words and got.to_json()["source"] == words
