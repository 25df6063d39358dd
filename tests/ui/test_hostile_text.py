"""Text from outside, shown in the window as the CLI prints it (issue 31): an OSC 52 clipboard write,
a screen clear, a C1 control and a right-to-left override, through a model's name, a file name, a
tensor name, an engine log line and a model's reply. None reaches the screen raw; each is shown as
its escape, so the user still sees what the file or the server said."""

from __future__ import annotations

from pathlib import Path

from app.sessions.chat import Reply
from app.ui.chat_panel import ForkColumn, turn_html
from app.ui.main_window import MainWindow
from tests.fixtures import gguf_factory, gguf_mutate, shapes

HOSTILE = "\x1b]52;c;ZXZpbA==\x07\x1b[2J\x9b\u202e"
RAW = ("\x1b", "\x07", "\x9b", "\u202e")
ESCAPED = r"\x1b]52;c;ZXZpbA==\x07\x1b[2J\x9b\u202e"


def raw_in(text: str) -> list[str]:
    return [repr(c) for c in RAW if c in text]


def test_a_hostile_file_and_model_name_are_shown_escaped(window: MainWindow, qtbot, tmp_path: Path) -> None:
    header = gguf_mutate.read(gguf_factory.ensure(shapes.TINY))
    header.kv("general.name").raw = gguf_mutate.encode(gguf_mutate.STR, f"tiny{HOSTILE}")
    path = header.write(tmp_path / f"named{HOSTILE}.gguf")
    with qtbot.waitSignal(window.planned, timeout=20_000):
        assert window.open_model(path)
    label = window.model_label.text()
    assert f"named{ESCAPED}.gguf" in label and not raw_in(label)
    assert not raw_in(window.model_label.toolTip()) and ESCAPED in window.model_label.toolTip()
    assert not raw_in(window.windowTitle() + window.statusBar().currentMessage())


def test_a_hostile_tensor_name_is_refused_in_words_shown_escaped(window: MainWindow, tmp_path: Path) -> None:
    header = gguf_mutate.read(gguf_factory.ensure(shapes.TINY))
    header.tensors[-1].name = f"blk.0.{HOSTILE}".encode()
    path = header.write(tmp_path / "tensor.gguf")
    assert not window.open_model(path)
    said = window.error_message
    assert "is not one llama.cpp's llama loader creates" in said and ESCAPED in said
    assert not raw_in(window.error.text() + window.statusBar().currentMessage())


def test_an_engine_log_line_and_a_reply_are_shown_escaped(window: MainWindow, qtbot) -> None:
    window.console.append_lines([f"llama_model_loader: - kv   1: general.name str = {HOSTILE}\n"])
    log = window.console.toPlainText()
    assert ESCAPED in log and not raw_in(log)

    column = ForkColumn(0)
    qtbot.addWidget(column)
    column.show_reply(Reply(0, text=f"a reply {HOSTILE}\nnext line", finish_reason="stop"))
    reply = column.text.toPlainText()
    assert f"a reply {ESCAPED}" in reply and "next line" in reply and not raw_in(reply)
    assert not raw_in(turn_html("assistant", HOSTILE)) and ESCAPED in turn_html("assistant", HOSTILE)
