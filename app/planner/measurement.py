"""What pass 1 measured: the engine allocator's own numbers, per backend device.

Produced by ``app.probe.measure`` (the llama-cpp-python ``no_alloc`` probe) or by an engine
that measures itself; consumed by the solver. Sizes are bytes.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

from app.planner.settings import LaunchSettings


class MeasuredBy(Enum):
    """What ran pass 1."""

    #: app/probe/measure.py: a ``no_alloc`` load through the Python bindings (detail: which bindings).
    PROBE = "probe"
    #: app/probe/fit_params.py: the engine build's own libllama, loaded as llama-fit-params does but with
    #: llama-server's context parameters (detail: the build's backend).
    FIT_PARAMS = "fit-params"
    #: The opencoti engine measures its own compute buffer (window mode, app/probe/fit_params.py
    #: ``engine_measure``). It does not say which llama.cpp commit it carries: ``llama_commit`` is "".
    OPENCOTI = "opencoti"
    #: Numbers read from an engine's log (a recorded one, or a launch's; detail: which log).
    LOG = "log"


_PROBE_WORDS = "{} no_alloc probe"
_FIT_PARAMS_WORDS = ("the engine build's libllama ({}): llama-fit-params' no_alloc load with llama-server's "
                     "context parameters")
_OPENCOTI_WORDS = "the engine's own two-pass measurement (opencoti window mode)"


@dataclass(frozen=True)
class MeasurementSource:
    """Who measured, and a detail in words; ``str()`` is the phrase the CLI prints and the JSON (and
    the pass-1 cache) carries. Code asks ``kind``, never the words."""

    kind: MeasuredBy
    detail: str = ""

    def __str__(self) -> str:
        if self.kind is MeasuredBy.PROBE:
            return _PROBE_WORDS.format(self.detail or "llama-cpp-python")
        if self.kind is MeasuredBy.FIT_PARAMS:
            return _FIT_PARAMS_WORDS.format(self.detail)
        if self.kind is MeasuredBy.OPENCOTI:
            return _OPENCOTI_WORDS
        return self.detail

    @classmethod
    def from_text(cls, text: str) -> MeasurementSource:
        """The source a stored measurement names (the inverse of ``str``); words no kind has are a log's."""
        if text == _OPENCOTI_WORDS:
            return cls(MeasuredBy.OPENCOTI)
        head, tail = _FIT_PARAMS_WORDS.split("{}")
        if text.startswith(head) and text.endswith(tail):
            return cls(MeasuredBy.FIT_PARAMS, text[len(head):len(text) - len(tail)])
        if text.endswith(_PROBE_WORDS.format("")) and len(text) > len(_PROBE_WORDS.format("")):
            return cls(MeasuredBy.PROBE, text.removesuffix(_PROBE_WORDS.format("")))
        return cls(MeasuredBy.LOG, text)


#: What pass 1 is, unless said otherwise: the probe through llama-cpp-python.
PROBE_SOURCE = MeasurementSource(MeasuredBy.PROBE, "llama-cpp-python")


@dataclass(frozen=True)
class DeviceMeasurement:
    """One backend device as llama.cpp names it (``CPU``, ``CUDA0``, ``CUDA_Host``).

    host: True for host memory (``*_Host`` / ``*_Mapped`` / ``CPU``).
    """

    name: str
    compute: int = 0
    kv: int = 0
    host: bool = False


@dataclass(frozen=True)
class MeasuredCache:
    """One KV cache pass 1 created (a ``llama_kv_cache: size =`` line and its per-layer lines): its cells
    per stream, streams, the model layers it holds, and its K and V bytes. An iSWA model has two."""

    cells: int
    n_stream: int
    layers: tuple[int, ...]
    type_k: str
    k: int
    type_v: str
    v: int


@dataclass(frozen=True)
class MeasuredRecurrent:
    """The recurrent state pass 1 created (a ``llama_memory_recurrent: size =`` line): its rows (cells ×
    (1 + rollback snapshots)), the model's layers, and its R (conv) and S (SSM) bytes."""

    cells: int
    layers: int
    r: int
    s: int
    #: The model layers it holds (its per-layer lines; () when they were not logged).
    layer_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class Measurement:
    """A pass-1 result. ``backend`` is what measured: a ``Backend`` (app/planner/devices.py), or several
    joined by "+" ("CUDA+RPC"); only true for that backend. ``llama_commit``: the llama.cpp commit
    that measured, "" or "unknown" when not known (the opencoti engine's own measurement)."""

    devices: tuple[DeviceMeasurement, ...]
    backend: str
    llama_commit: str
    seconds: float
    source: MeasurementSource = PROBE_SOURCE
    kv_lines: tuple[str, ...] = field(default=())
    #: All KV caches together (bytes), from llama.cpp's ``llama_kv_cache: size =`` lines.
    kv_total: int = 0
    #: Host-side output (logits) buffer, bytes.
    output: int = 0
    #: Recurrent state of hybrid/SSM models (bytes), from ``llama_memory_recurrent: size =`` lines.
    recurrent: int = 0
    #: Things the reader should know (e.g. the tool could not express -kvu).
    warnings: tuple[str, ...] = field(default=())
    #: The launch settings pass 1 ran with (None: not recorded, e.g. numbers from a recorded log).
    #: Its numbers are only true for exactly these (docs/domain.md §1).
    launch: LaunchSettings | None = None
    #: The draft model's own pass 1 (``-md``): its compute buffers, KV and output buffer (None: no draft).
    draft: Measurement | None = None
    #: The vision projector's compute reserve per buffer (``reserve_compute_meta`` lines), when pass 1
    #: loaded the launch's ``--mmproj`` (app/planner/memory/projector.py).
    projector_compute: tuple[tuple[str, int], ...] = ()
    #: Each KV cache and the recurrent state, as their lines describe them: what a model the estimate does
    #: not know is planned from (app/planner/law.py).
    caches: tuple[MeasuredCache, ...] = ()
    recurrent_state: MeasuredRecurrent | None = None

    def device(self, name: str) -> DeviceMeasurement | None:
        return next((d for d in self.devices if d.name == name), None)

    @property
    def gpu_compute(self) -> dict[str, int]:
        return {d.name: d.compute for d in self.devices if not d.host}

    @property
    def host_compute(self) -> int:
        return sum(d.compute for d in self.devices if d.host)

    @property
    def llama_label(self) -> str:
        """Which llama.cpp measured, in words: ``llama.cpp 0c1e57098``; the opencoti engine by name."""
        return "llama.cpp opencoti" if self.source.kind is MeasuredBy.OPENCOTI else llama_label(self.llama_commit)

    def to_json(self) -> dict[str, Any]:
        """``source`` in words (as ``str``); the draft's likewise."""
        return asdict(self) | {"source": str(self.source), "draft": self.draft.to_json() if self.draft else None}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Measurement:
        devs = tuple(DeviceMeasurement(**d) for d in data.get("devices", ()))
        return cls(devs, data["backend"], data["llama_commit"], float(data["seconds"]),
                   MeasurementSource.from_text(str(data.get("source", PROBE_SOURCE))), tuple(data.get("kv_lines", ())),
                   int(data.get("kv_total", 0)), int(data.get("output", 0)), int(data.get("recurrent", 0)),
                   tuple(data.get("warnings", ())),
                   LaunchSettings.from_json(data["launch"]) if data.get("launch") else None,
                   cls.from_json(data["draft"]) if data.get("draft") else None,
                   tuple((str(n), int(b)) for n, b in data.get("projector_compute", ())),
                   tuple(MeasuredCache(**(c | {"layers": tuple(c["layers"])})) for c in data.get("caches", ())),
                   MeasuredRecurrent(**(data["recurrent_state"] | {"layer_ids": tuple(data["recurrent_state"].get(
                       "layer_ids", ()))})) if data.get("recurrent_state") else None)


def llama_label(commit: str) -> str:
    """``llama.cpp 0c1e57098`` for a measurement's ``llama_commit``, or ``llama.cpp (commit unknown)``."""
    known = re.fullmatch(r"[0-9a-f]{7,40}", commit) is not None
    return f"llama.cpp {commit[:9]}" if known else "llama.cpp (commit unknown)" if commit in ("", "unknown") \
        else f"llama.cpp {commit}"


def gpu_caveat(measurement: Measurement, *, targets_gpu: bool, fit_params_tool: str | None = None) -> str | None:
    """A sentence for the plan and the UI when the numbers come from another backend than the plan's.
    ``fit_params_tool``: the engine build's llama-fit-params, when there is one: its build's library
    is offered as a way to measure (app/probe/fit_params.py)."""
    if not targets_gpu or any(not d.host for d in measurement.devices):
        return None
    options = ["build the engine with CUDA (`headroom engine build` with nvcc and cuBLAS installed: pass 1 then "
               "loads that build's library)",
               "install a CUDA build of llama-cpp-python "
               '(CMAKE_ARGS="-DGGML_CUDA=on" pip install --force-reinstall --no-cache-dir llama-cpp-python==0.3.36; '
               "`headroom doctor` shows which build you have)"]
    if fit_params_tool is not None:
        options.insert(0, "measure with the engine build's own library, as llama-fit-params does but with "
                          "llama-server's context parameters (headroom measure --with fit-params)")
    return (f"Pass 1 measured with the {measurement.backend} backend (llama-cpp-python here cannot offload "
            f"to a GPU): its compute buffer is the {measurement.backend} backend's, not the GPU's, so a plan "
            "for GPUs estimates their compute buffers. For GPU numbers, " + ", or ".join(options) + ".")
