"""The chat tab on the real engine (tiny llama with a ChatML template, CPU): two turns streamed
through the model's template with their numbers, a fork of three side by side with the proof, one
fork reply carried into the chat, Stop, and the chat kept when the engine stops."""

from __future__ import annotations

import pytest

from app.ui.chat_panel import FORK_LINES, USER_COLOURS, ChatPanel, lines_tall, shown
from app.ui.qt import Qt, QTabWidget, QTextDocument

LEFT = Qt.MouseButton.LeftButton
#: The cells a slot holds in the chat test: the Stop's reply may not end by itself before the click.
STOP_SLOT = 32768


def _launch(window, model, engine_build, qtbot, n_parallel: int, n_ctx: int | None = None) -> None:
    with qtbot.waitSignal(window.launch.enginesFound, timeout=120_000) as found:
        window.launch.discover()
    paths = [e.path for e in found.args[0]]
    window.settings.engine.setCurrentIndex(paths.index(str(engine_build.server)))
    window.settings.n_parallel.setValue(n_parallel)
    window.settings.kv_unified.setChecked(n_parallel > 1)
    assert window.open_model(model)
    if n_ctx is not None:
        window.settings.set_context(n_ctx)
    with qtbot.waitSignal(window.launch.engineReady, timeout=120_000):
        qtbot.mouseClick(window.launch.launch_button, LEFT)


def _send(chat: ChatPanel, qtbot, text: str, button=None):
    chat.message.setText(text)
    with qtbot.waitSignal(chat.replyDone, timeout=120_000) as done:
        qtbot.mouseClick(button or chat.send_button, LEFT)
    return done.args[0]


def _shown(text: str) -> str:
    """Plain text as the view shows it (the tiny model's random bytes hold control characters and
    line breaks of every kind; the view draws them as symbols and one break)."""
    doc = QTextDocument()
    doc.setHtml(shown(text))
    return doc.toPlainText()


@pytest.mark.engine
def test_chat_two_turns_a_fork_kept_then_stop(window, tiny_chat_model, engine_build, qtbot):
    chat: ChatPanel = window.chat
    stack = chat.parentWidget()
    tabs = stack.parentWidget() if stack is not None else None
    assert isinstance(tabs, QTabWidget) and tabs.tabText(0) == "Chat" and tabs.tabText(1) == "Shared sessions"
    assert tabs.currentWidget() is chat  # the chat is what the tab shows first
    assert not chat.send_button.isEnabled() and "Launch the engine" in chat.status.text()
    window.resize(1280, 860)  # the window's size on a first run
    # (a slot of 32k cells: the reply Stop ends below runs far longer than a click takes to arrive. A
    # slot of 2,730 filled in about a second on a fast machine, and that reply once ended by itself first)
    _launch(window, tiny_chat_model, engine_build, qtbot, 3, n_ctx=3 * STOP_SLOT)
    assert window.current.running.launch.n_ctx == 3 * STOP_SLOT
    assert chat.send_button.isEnabled() and chat.fork_button.isEnabled()
    assert chat.k.maximum() == 3 and "Engine ready" in chat.status.text()

    chat.max_tokens.setValue(10)
    chat.ignore_eos = True  # replies of exactly the length asked for
    first = _send(chat, qtbot, "Hello <b>model</b>!")
    assert first.ok, first.error
    reply = first.replies[0]
    assert reply.predicted == 10 and reply.tokens_per_second > 0
    plain = chat.view.toPlainText()
    assert "You\nHello <b>model</b>!" in plain  # typed text is shown as typed, never as markup
    assert "Model\n" + _shown(reply.text) in plain
    assert reply.stats() in plain and "10 tokens" in plain and "tokens/s" in plain
    assert USER_COLOURS[0] in chat.view.toHtml().lower()  # your turns have their own colour

    second = _send(chat, qtbot, "And then?")
    assert second.ok, second.error
    again = second.replies[0]
    assert again.prompt_cached >= reply.prompt_tokens  # the first turn came from the cache
    assert f"{again.prompt_cached:,} of {again.prompt_tokens:,} prompt tokens reused from the cache" in (
        chat.view.toPlainText())
    assert [m.role for m, _ in chat.transcript] == ["user", "assistant"] * 2

    chat.max_tokens.setValue(12)
    chat.k.setValue(3)
    before = list(chat.transcript)
    fork = _send(chat, qtbot, "Three ways to go on", chat.fork_button)
    assert fork.ok, fork.error
    assert len(chat.columns) == 3 and all(c.isVisible() for c in chat.columns)  # side by side
    qtbot.waitUntil(lambda: all(c.text.height() >= lines_tall(c.text, FORK_LINES) for c in chat.columns)
                    and chat.view.height() >= lines_tall(chat.view, FORK_LINES), timeout=5_000)  # at the first-run size
    assert len({r.text for r in fork.replies}) == 3
    for col, r in zip(chat.columns, fork.replies, strict=True):
        assert _shown(r.text) in col.text.toPlainText()
    assert "prompt evaluated once, shared by 3" in chat.status.text()
    assert chat.transcript == before  # nothing kept until you choose
    qtbot.mouseClick(chat.columns[1].keep, LEFT)
    assert [m.content for m, _ in chat.transcript[-2:]] == ["Three ways to go on", fork.replies[1].text]
    assert not chat.columns

    # A reply that cannot end by itself, streamed until Stop. Last: how long it ran before the Stop
    # took is the machine's, and the chat (its bytes re-tokenized) may then outgrow the context.
    chat.max_tokens.setValue(STOP_SLOT)
    chat.message.setText("Go on and on.")
    qtbot.mouseClick(chat.send_button, LEFT)
    assert chat.stop_button.isEnabled() and not chat.send_button.isEnabled()
    qtbot.waitSignal(chat.streamed, timeout=120_000).wait()  # text shown while it is still replying
    assert chat.stop_button.isEnabled()
    with qtbot.waitSignal(chat.replyDone, timeout=60_000) as stopped:
        qtbot.mouseClick(chat.stop_button, LEFT)
    out = stopped.args[0]
    assert out.stopped and out.replies[0].text
    assert "Stopped" in chat.status.text()
    assert _shown(out.replies[0].text) in chat.view.toPlainText()
    assert chat.send_button.isEnabled() and not chat.stop_button.isEnabled()

    with qtbot.waitSignal(window.launch.engineStopped, timeout=30_000):
        qtbot.mouseClick(window.launch.stop_button, LEFT)
    assert not chat.send_button.isEnabled() and not chat.fork_button.isEnabled()
    assert "the chat is kept" in chat.status.text()
    assert _shown(fork.replies[1].text) in chat.view.toPlainText()  # the text outlives the engine
    assert _shown(out.replies[0].text) in chat.view.toPlainText()


@pytest.mark.engine
def test_an_engine_with_one_slot_chats_but_offers_no_fork(window, tiny_chat_model, engine_build, qtbot):
    chat: ChatPanel = window.chat
    _launch(window, tiny_chat_model, engine_build, qtbot, 1)
    assert chat.send_button.isEnabled() and not chat.fork_button.isEnabled()
    assert "Parallel sessions 2 or more" in chat.status.text()
    chat.max_tokens.setValue(4)
    out = _send(chat, qtbot, "hi")
    assert out.ok, out.error
    assert out.replies[0].stats() in chat.view.toPlainText()
    # Send with nothing typed says so.
    qtbot.mouseClick(chat.send_button, LEFT)
    assert "Type a message first" in chat.status.text() and chat.asking is None
    # A pasted document longer than the context (and than Qt's default 32,767 characters for a line):
    # all of it taken, refused with the numbers, and still there.
    before = list(chat.transcript)
    long_text = "word " * 40_000
    chat.message.setText(long_text)
    assert chat.message.text() == long_text
    with qtbot.waitSignal(chat.failed, timeout=120_000) as refused:
        qtbot.mouseClick(chat.send_button, LEFT)
    assert "more than the 4,096 tokens of context a session has on this engine" in refused.args[0]
    tokens = int(refused.args[0].split(" tokens")[0].rsplit(" ", 1)[1].replace(",", ""))
    assert tokens > 40_000  # the whole paste was counted
    assert "start a New chat, or launch with a longer context" in chat.status.text()
    assert chat.message.text() == long_text and chat.transcript == before
    assert chat.send_button.isEnabled()
    qtbot.mouseClick(chat.new_button, LEFT)
    assert chat.transcript == [] and chat.view.toPlainText() == ""
    with qtbot.waitSignal(window.launch.engineStopped, timeout=30_000):
        qtbot.mouseClick(window.launch.stop_button, LEFT)


def test_model_text_is_shown_as_text_never_as_markup():
    assert shown("<b>x</b> & y") == "&lt;b&gt;x&lt;/b&gt; &amp; y"
    assert shown("a\r\nb\rc\nd") == "a<br>b<br>c<br>d"
    # control characters and a right-to-left override as their escapes, as the CLI prints a reply
    assert shown("\x02\x1b\u202e\tend") == "\\x02\\x1b\\u202e\tend"


@pytest.mark.engine
@pytest.mark.parametrize("has_template", [True, False], ids=["chatml", "no-template"])
def test_the_chat_says_when_the_model_has_no_template_and_sessions_say_they_are_plain_text(
        window, tiny_chat_model, tiny_model, engine_build, qtbot, has_template: bool):
    """Issue 29: a GGUF without a chat template is formatted as ChatML by the engine, silently until now;
    Shared sessions are completions, not a chat. Both are said when the engine is ready."""
    from app.ui.chat_panel import NO_TEMPLATE
    from app.ui.sessions_panel import PLAIN_TEXT

    _launch(window, tiny_chat_model if has_template else tiny_model, engine_build, qtbot, n_parallel=2)
    said = window.chat.status.text()
    assert said.startswith("Engine ready: type a message and Send")
    assert (NO_TEMPLATE.split(":")[0] in said) is not has_template
    assert PLAIN_TEXT in window.sessions.result.text()
    with qtbot.waitSignal(window.launch.engineStopped, timeout=30_000):
        qtbot.mouseClick(window.launch.stop_button, LEFT)
