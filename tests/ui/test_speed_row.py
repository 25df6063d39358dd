"""The speed row after launch (issue 30, build item 3) on the real engine (the tiny ChatML llama on the
CPU): once the engine is up the row shows the plan's predicted tokens/s; after a chat reply it shows
what the engine measured (the reply's own timings and /metrics) beside the prediction; a fork's K
replies leave it as it was; after Stop it says it is about the last run."""

from __future__ import annotations

import json

import pytest

from app.machine import calibrate
from app.planner.words import tokens_per_s
from app.sessions.reply_speed import WAITING, predicted_line
from tests.ui.test_chat_in_window import _launch, _send


@pytest.mark.engine
def test_the_speed_row_shows_predicted_and_measured_after_a_reply(window, tiny_chat_model, tiny_model, engine_build,
                                                                  qtbot,
                                                                  tmp_path, monkeypatch):
    store = tmp_path / "speed-calibration.json"  # (not this machine's own cache)
    monkeypatch.setattr(calibrate, "calibration_path", lambda: store)
    row = window.launch.speed_row
    assert not row.isVisible()  # nothing runs: nothing to say
    _launch(window, tiny_chat_model, engine_build, qtbot, 2)
    plan = window.current.running
    assert plan is not None and plan.speed is not None
    assert row.isVisible() and row.text().startswith("Speed predicted: decode ") and WAITING in row.text()
    assert f"prefill {tokens_per_s(plan.speed.at_fill(0.5).prefill)} tok/s half-way" in row.text()

    chat = window.chat
    chat.max_tokens.setValue(12)
    chat.ignore_eos = True  # a reply of exactly 12 tokens
    done = _send(chat, qtbot, "How fast are you?")
    assert done.ok, done.error
    reply = done.replies[0]
    qtbot.waitUntil(lambda: row.last is not None, timeout=30_000)
    measured = row.last
    assert measured is not None and measured.check is not None
    # Measured: the engine's own timings of that reply; predicted: the plan's speed model at its fill.
    assert measured.measured.predicted_n == reply.predicted == 12
    assert measured.measured.predicted_per_second == reply.tokens_per_second > 0
    assert measured.measured.prompt_n == reply.prompt_evaluated > 0 and measured.measured.prompt_per_second > 0
    check = measured.check
    assert check.decode_predicted > 0 and check.prefill_predicted > 0
    text = row.text()
    # two lines (the whole sentence pushed the form's command line below the fold at 1366×768): the
    # prediction, then the reply measured beside it; the rest in the row's tooltip
    assert text == f"{predicted_line(plan)}\n{measured.short()}"
    assert measured.short().startswith(f"Last reply: decode {tokens_per_s(reply.tokens_per_second)} tok/s, "
                                       f"{tokens_per_s(check.decode_predicted)} predicted at its fill; prefill ")
    text = row.toolTip()
    assert "\n/metrics since its last read" in text  # a sentence a line: not one screen-wide tooltip line
    text = text.replace("\n", " ")
    assert (f"decode {tokens_per_s(reply.tokens_per_second)} tok/s measured (12 tokens), "
            f"{tokens_per_s(check.decode_predicted)} predicted") in text
    # (a chat message is a prompt of a few dozen tokens: its prefill rate is said, not compared with a
    # model that prices whole ubatches, nor learned)
    assert measured.measured.prompt_n < window.current.running.launch.effective_n_ubatch // 2
    assert "not compared (a prompt under" in text and check.prefill_ratio is None
    # /metrics (the window launches with --metrics): the engine's average over that reply.
    assert measured.metrics is not None and measured.metrics.predicted_per_second > 0
    assert f"/metrics since its last read: decode {tokens_per_s(measured.metrics.predicted_per_second)}" in text
    # the calibration learned measured ÷ predicted from it, as `headroom serve` does: later plans scale by it;
    # a rate timed beside other work on every core (CI runs beside it) is outside the plausible band: the row
    # says so and nothing is learned (app/engine/speed_check.py ``not_learned``)
    key = calibrate.learned_key(window.current.planning_inventory(), window.current.model.shape.name)
    if check.decode_ratio is None:
        assert measured.learned is None and check.decode_measured_ratio is not None
        assert "Speed: not learned: measured ÷ predicted decode ×" in text and "the next launch measures again" in text
        stored = json.loads(store.read_text()) if store.is_file() else {}
        assert key not in (stored.get("learned") or {})
    else:
        assert measured.learned is True
        assert (f"Later plans of this model on these devices scale their predictions by it (decode "
                f"×{check.decode_ratio:.2g}") in text
        learned = json.loads(store.read_text())["learned"][key]
        assert learned["decode_scale"] == pytest.approx(check.decode_ratio) and "prefill_scale" not in learned

    # A fork's replies run side by side on shared slots: not one reply's speed, the row keeps the last.
    chat.k.setValue(2)
    chat.message.setText("Two ways")
    with qtbot.waitSignal(chat.replyDone, timeout=120_000):
        chat.fork_button.click()
    assert row.last is measured and row.toolTip().replace("\n", " ") == text

    with qtbot.waitSignal(window.launch.engineStopped, timeout=60_000):
        window.launch.stop()
    assert row.text().startswith("Last run (stopped): Speed predicted:")
    # another model opened: the last run's speeds were about the one before (a walkthrough saw them stay)
    assert window.open_model(tiny_model)
    assert not row.isVisible() and row.text() == "" and row.last is None
