"""Corrupted GGUFs: Headroom refuses each one llama.cpp would refuse, naming the problem, and plans the rest.

Issue 17, §3: 55 of 500 corrupted copies of real models were planned ("FITS", or "host RAM short by
122880 TiB") although llama.cpp refuses to load them. Here 240 seeded corruptions of the two small
test models (the tiny llama and the tiny iSWA gemma3; tests/fixtures/gguf_mutate.py draws them from
the classes llama.cpp's loader refuses, plus blind byte flips and truncations) each go through
``headroom plan`` and through llama.cpp's own no_alloc load with a context (pass 1's path:
app/probe/worker.py's parameters, all 240 in one child process, tests/fixtures/noalloc_batch.py).

Every copy must be either refused by ``headroom plan`` (exit 2, one line that names the problem) or
loaded by llama.cpp; none may hang or print a traceback, and nothing Headroom prints may carry a
raw control character from the file (a ``general.name`` of ANSI escapes is printed escaped).
"""

from __future__ import annotations

import contextlib
import io
import os
import random
import signal
import unicodedata
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import pytest

from app.cli import main
from app.planner.settings import LaunchSettings
from tests.fixtures import gguf_factory, gguf_mutate, shapes
from tests.fixtures.noalloc_batch import Job, run_jobs

pytestmark = [pytest.mark.engine]

SEED = 17
PER_MODEL = 120
#: A plan of a header this small takes milliseconds; anything near this is a hang.
HANG_S = 20


class Hung(Exception):
    pass


@contextlib.contextmanager
def deadline(seconds: int) -> Iterator[None]:
    def fire(signum: int, frame: FrameType | None) -> None:
        raise Hung(f"no answer within {seconds} s")

    old = signal.signal(signal.SIGALRM, fire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def plan(path: Path) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), deadline(HANG_S):
        rc = main(["plan", str(path), "--gpu", "H200", "--ctx", "4096"])
    return rc, out.getvalue(), err.getvalue()


def raw_controls(text: str) -> list[str]:
    """Control and format characters other than the line breaks Headroom itself prints."""
    return [repr(c) for c in text if c != "\n" and unicodedata.category(c) in ("Cc", "Cf")]


def corrupted_copies(tmp_path: Path) -> list[tuple[str, Path]]:
    rng = random.Random(SEED)
    copies: list[tuple[str, Path]] = []
    for spec in (shapes.TINY, shapes.TINY_GEMMA3):
        stream = gguf_mutate.mutations(gguf_mutate.read(gguf_factory.ensure(spec)), rng)
        for i in range(PER_MODEL):
            kind, blob, header = next(stream)
            path = tmp_path / f"{spec.name}-{i:03d}-{kind}.gguf"
            if kind == "truncate":
                path.write_bytes(blob)  # the file ends inside its header
            else:
                header.write(path, blob)
            copies.append((kind, path))
    return copies


def test_every_corrupted_copy_is_refused_with_a_reason_or_loads_in_llama_cpp(
        engine_build: object, tmp_path: Path) -> None:
    copies = corrupted_copies(tmp_path)
    assert len(copies) >= 200 and set(gguf_mutate.KINDS) <= {k for k, _ in copies}
    verdicts = [plan(path) for _, path in copies]
    loads = run_jobs([Job(path, (LaunchSettings(n_ctx=4096).to_json(),)) for _, path in copies], timeout=900)

    wrong, outcomes = [], Counter[str]()
    for (kind, path), (rc, out, err), (llama,) in zip(copies, verdicts, loads, strict=True):
        assert "Traceback" not in out + err, f"{path.name}: {err}"
        assert not raw_controls(out + err), f"{path.name} printed {raw_controls(out + err)}"
        if rc == 2:
            assert out == "" and err.count("\n") == 1 and err.startswith("headroom plan: "), (path.name, err)
            assert len(err) > len("headroom plan: ") + 10, (path.name, err)  # it says what is wrong
            outcomes["refused"] += 1
            continue
        assert rc in (0, 1), (path.name, rc, err)
        outcomes["planned"] += 1
        if not llama.ok:
            wrong.append(f"{path.name} ({kind}) was planned, but llama.cpp: {llama.error} {llama.crashed} "
                         f"{' | '.join(llama.tail[-2:])}")
    assert not wrong, "\n".join(wrong)
    # Both sides are exercised: most copies are refused, and the harmless ones still plan and load.
    assert outcomes["refused"] >= len(copies) // 2 and outcomes["planned"] >= 20, outcomes


def test_a_name_made_of_escape_sequences_is_printed_escaped(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """A hostile ``general.name`` and a hostile file name: plan's heading names the file (as the window
    does), escaped, and nothing raw reaches the terminal."""
    header = gguf_mutate.read(gguf_factory.ensure(shapes.TINY))
    header.kv("general.name").raw = gguf_mutate.encode(gguf_mutate.STR, "\x1b]0;pwned\x07\x1b[2Jtiny\u202e")
    path = header.write(tmp_path / "named\x1b[2J\u202e.gguf")
    assert main(["plan", str(path), "--gpu", "H200", "--ctx", "4096"]) == 0
    out = capsys.readouterr().out
    assert r"named\x1b[2J\u202e.gguf (llama, 2 layers)" in out.splitlines()
    assert "pwned" not in out
    assert not raw_controls(out)


#: An OSC 52 clipboard write, a screen clear, a C1 CSI and a right-to-left override (issue 31).
HOSTILE = "\x1b]52;c;aGk=\x07\x1b[2J\x9b2J\u202e"


def _extra_tensor(h: gguf_mutate.Header) -> None:
    last = h.tensors[-1]
    h.tensors.append(gguf_mutate.Tensor(b"blk.0." + HOSTILE.encode(), list(last.dims), last.ggml_type, 0))
    h.repack_offsets()


def _duplicate_key(h: gguf_mutate.Header) -> None:
    h.kvs += [gguf_mutate.KV(HOSTILE.encode(), gguf_mutate.STR, gguf_mutate.encode(gguf_mutate.STR, "a"))] * 2


def _unread_key(h: gguf_mutate.Header) -> None:
    h.kvs.append(gguf_mutate.KV(f"unread{HOSTILE}".encode(), gguf_mutate.STR,
                                gguf_mutate.encode(gguf_mutate.STR, f"unread{HOSTILE}")))


@pytest.mark.parametrize("json_flag", [[], ["--json"]], ids=["text", "json"])
@pytest.mark.parametrize(("change", "refusal"), [(_extra_tensor, "is not one llama.cpp's llama loader creates"),
                                                 (_duplicate_key, "duplicate key"), (_unread_key, "")],
                         ids=["tensor-name", "duplicate-key", "unread-key"])
def test_escape_sequences_in_a_tensor_name_or_a_key_never_reach_the_terminal(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], change: object, refusal: str, json_flag: list[str]) -> None:
    """A refusal names the tensor or key (and the file, whose name carries them too) as ``app.text.printable``
    escapes it; a key the plan never uses is not printed at all. Neither the text nor the JSON carries one of
    the sequences raw."""
    header = gguf_mutate.read(gguf_factory.ensure(shapes.TINY))
    assert callable(change)
    change(header)
    path = header.write(tmp_path / f"m{HOSTILE}.gguf")
    rc = main(["plan", str(path), "--gpu", "H200", "--ctx", "4096", *json_flag])
    out, err = capsys.readouterr()
    for raw in ("\x1b]52", "\x1b[2J", "\x9b", "\u202e"):
        assert raw not in out + err
    assert not raw_controls(out + err)
    if refusal:
        assert rc == 2 and refusal in err
        assert r"\x1b]52;c;aGk=\x07\x1b[2J\x9b2J\u202e" in err  # named, escaped
    else:
        assert rc == 0 and "unread" not in out + err  # neither the key nor its value is printed


@pytest.mark.parametrize("kind", ["fifo", "char-device"])
def test_plan_never_blocks_on_a_file_that_is_not_regular(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                         kind: str) -> None:
    """A FIFO blocked ``headroom plan`` forever (opening it waits for a writer); a device is no model."""
    if kind == "fifo":
        path = tmp_path / "model.gguf"
        os.mkfifo(path)
    else:
        path = Path("/dev/zero")
    with deadline(HANG_S):
        rc = main(["plan", str(path), "--gpu", "H200"])
    err = capsys.readouterr().err
    assert rc == 2
    assert err == f"headroom plan: {path}: not a regular file ({'a FIFO' if kind == 'fifo' else 'a character device'}): " \
                  "a model must be a GGUF file\n"
