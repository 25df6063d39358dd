"""Issue 20 with the real engine (the CPU build, a tiny model): a first run that serves, plan vs
actual for a GPU plan that ran on the CPU, what a new run and another model clear, the server's
port, and Continue going the CLI's way and saying what the engine said."""

from __future__ import annotations

import json
import re
import socket
import urllib.request

import pytest

from app.cli import main
from app.engine import check_report
from app.engine.capabilities import free_port
from app.planner import words
from app.planner.plan_types import PlanMode
from app.ui import demo
from app.ui.application import open_first
from app.ui.qt import QApplication, Qt

LEFT = Qt.MouseButton.LeftButton
# llama-server's slot timing line (tools/server/server-context.cpp, print_timing):
# slot print_timing: id  2 | task 27 | prompt eval time =       2.66 ms /    51 tokens (...)
PROMPT_EVAL = re.compile(r"prompt eval time =\s+[\d.]+ ms /\s+(\d+) tokens")


def _launch(window, qtbot) -> str:
    with qtbot.waitSignal(window.launch.engineReady, timeout=120_000) as ready:
        qtbot.mouseClick(window.launch.launch_button, LEFT)
    return str(ready.args[0])


def _stop(window, qtbot) -> None:
    with qtbot.waitSignal(window.launch.engineStopped, timeout=30_000):
        qtbot.mouseClick(window.launch.stop_button, LEFT)


def _engines(window, qtbot) -> None:
    with qtbot.waitSignal(window.launch.enginesFound, timeout=120_000):
        window.launch.discover()


@pytest.mark.engine
def test_first_run_demo_then_a_real_model_launches_with_nothing_else_touched(window, tiny_model, engine_build,
                                                                              qtbot):
    assert window.state.last_model == "" and window.state.settings == {}  # a fresh config
    with qtbot.waitSignal(window.planned):
        open_first(window, None, demo=False)  # what `headroom` opens first on a fresh machine
    assert window.model_path == demo.demo_model_path() and not window.demo_banner.isHidden()
    _engines(window, qtbot)  # as the window does at start
    assert not window.launch.launch_button.isEnabled()  # the demo has no weights
    with qtbot.waitSignal(window.planned) as sig:
        assert window.open_model(tiny_model)  # File ▸ Open model…
    plan = sig.args[0]
    assert plan.feasible and plan.launch.n_ctx <= 4096  # within the model's training, not the demo's 512k
    assert window.launch.launch_button.isEnabled(), window.launch.launch_button.toolTip()
    with qtbot.waitSignal(window.launch.checked, timeout=180_000) as checked:
        url = _launch(window, qtbot)  # Launch measures first (pass 1), as `headroom serve` does
    assert "measured by pass 1" in window.measure.status_text()
    assert window.current.running is not None and window.current.running.host.compute_pinned == \
        window.plan.host.compute_pinned  # what runs is the plan re-made with pass 1
    view = window.launch.check_table()
    assert checked.args[0].ok and view.rows and {r[5] for r in view.rows} == {check_report.OK}, view.rows
    assert view.summary.text() == "The engine allocated what the plan said (every buffer within 1 MiB)."
    assert "#c77800" not in window.launch.check.styleSheet()
    with urllib.request.urlopen(url + "/health", timeout=5) as resp:
        assert resp.status == 200
    with urllib.request.urlopen(window.server.settings().base_url() + "/models", timeout=5) as resp:
        assert resp.status == 200 and json.loads(resp.read())["data"]  # the base URL the panel shows works
    assert "healthy" in window.launch.status.text()
    _stop(window, qtbot)


@pytest.mark.engine
def test_a_gpu_plan_on_a_cpu_engine_says_so_before_launch_and_launches_what_runs(window, tiny_model,
                                                                                tiny_chat_model, engine_build,
                                                                                qtbot):
    """Issue 46: a plan for a simulated RTX 4090 launched on the CPU engine kept "Speed predicted: 842 tok/s"
    beside the 13 the reply ran at, and said only after Launch that the GPU plan could not be checked. Now
    the window says before Launch what the engine will run on and how fast, and Launch starts that plan."""
    _engines(window, qtbot)
    window.settings.engine.setCurrentIndex(window.settings.engine.findData(str(engine_build.server)))
    window.devices.choose_simulated("RTX 4090")
    assert window.open_model(tiny_model)
    shown = window.plan
    assert shown is not None and shown.mode == PlanMode.STOCK and shown.gpus
    runs = window.launch.what_runs(shown)
    assert runs is not shown and runs.mode == PlanMode.CPU and not runs.gpus and runs.speed is not None
    advice = window.launch.advice_label.text()
    assert not window.launch.advice_label.isHidden()
    assert ("NVIDIA GeForce RTX 4090 (simulated): this engine has no GPU code (a CPU build), so it runs on the CPU"
            in advice)
    assert f"Launch runs it on the CPU: expected {words.speed_sentence(runs.speed)}" in advice.replace("&#x27;", "'")
    with qtbot.waitSignal(window.launch.checked, timeout=120_000) as checked:
        qtbot.mouseClick(window.launch.launch_button, LEFT)
    check = checked.args[0]
    view = window.launch.check_table()
    qtbot.waitUntil(view.isVisible)
    running = window.current.running
    assert running is not None and running.mode == PlanMode.CPU and not running.gpus
    assert running.speed == runs.speed  # what the speed row predicts: the CPU's
    assert " -ngl 0 " in window.launch.command.text()
    assert view.summary.text().startswith("The engine allocated what the plan said")
    assert window.launch.check.text() == view.summary.text()
    assert {r[0] for r in view.rows} == {"host"}
    assert {r[5] for r in view.rows} <= {check_report.OK, check_report.ESTIMATE, check_report.NOT_LOGGED}
    assert len(view.rows) == len(check.rows) and view.legend.text() == check_report.LEGEND
    assert view.legend.isVisible() and view.summary.isVisible()
    assert view.y() < window.budget.y()  # while its engine runs, plan vs actual over the plan
    command = window.launch.command.text()
    qtbot.waitUntil(lambda: window.console.text().count("\n") > 5, timeout=10_000)
    bar = window.console.verticalScrollBar()
    assert bar.value() == bar.maximum()  # the log follows the engine
    # a run as long as a user's: the engine's memory was read (the live readings over the plan)
    qtbot.waitUntil(lambda: "Waiting" not in window.live_view.status.text(), timeout=10_000)
    assert window.live_view.isVisible() and window.live_view.y() < window.budget.y()
    _stop(window, qtbot)
    assert view.isVisible() and "last run" in view.title()
    # after Stop the plan's verdict is at the top of Budget; the last reading (frozen) and the last
    # run's table under the plan
    qtbot.waitUntil(lambda: view.y() > window.budget.y() + window.budget.verdict.y())
    assert window.live_view.isVisible() and window.live_view.y() > window.budget.y()
    assert window.budget.verdict.mapTo(window.plan_scroll.widget(), window.budget.verdict.rect().topLeft()).y() < 60
    # a second run starts a fresh log, at the top, with its own command
    window.server.port.setValue(free_port())
    _launch(window, qtbot)
    text = window.console.text()
    assert text.startswith(f"$ {window.launch.command.text()}") and text.count("$ ") == 1
    assert window.launch.command.text() != command  # (another port)
    _stop(window, qtbot)
    # another model: the last run's command line and check were about the one before
    assert window.open_model(tiny_chat_model)
    assert window.launch.command.isHidden() and window.launch.command.text() == ""
    assert not view.isVisible() and window.launch.check.text() == ""


@pytest.mark.engine
def test_the_port_is_the_one_set_and_a_busy_one_is_said_before_launch(window, tiny_model, engine_build, qtbot):
    _engines(window, qtbot)
    window.settings.engine.setCurrentIndex(window.settings.engine.findData(str(engine_build.server)))
    assert window.open_model(tiny_model)
    port = free_port()
    window.server.port.setValue(port)
    assert window.server.url.text() == f"http://127.0.0.1:{port}/v1"
    url = _launch(window, qtbot)
    assert url == f"http://127.0.0.1:{port}" and f"--port {port}" in window.launch.command.text()
    _stop(window, qtbot)
    assert window.server.settings().port == port  # the same port next time
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        window.server.port.setValue(busy)
        with qtbot.waitSignal(window.launch.launchFailed) as failed:
            qtbot.mouseClick(window.launch.launch_button, LEFT)
    assert f"port {busy} on 127.0.0.1 is in use" in failed.args[0]
    assert window.current.running_engine is None and window.launch.launch_button.isEnabled()


@pytest.mark.engine
def test_continue_goes_the_clis_way_and_reports_what_the_engine_logged(window, tiny_model, engine_build, qtbot,
                                                                        tmp_path, monkeypatch, capsys):
    _engines(window, qtbot)
    window.settings.engine.setCurrentIndex(window.settings.engine.findData(str(engine_build.server)))
    window.settings.n_parallel.setValue(3)
    window.settings.kv_unified.setChecked(True)
    assert window.open_model(tiny_model)
    url = _launch(window, qtbot)
    panel = window.sessions
    panel.prompt.setText("Once upon a time")
    panel.k.setValue(3)
    with qtbot.waitSignal(panel.turnDone, timeout=120_000) as forked:
        qtbot.mouseClick(panel.fork_button, LEFT)
    assert forked.args[0].ok and "prompt evaluated once, shared by 3" in panel.result.text()
    panel.chosen.setCurrentText("s2")
    panel.prompt.setText(" and then")
    before = len(window.current.running_engine.log_tail())
    with qtbot.waitSignal(panel.turnDone, timeout=120_000) as cont:
        qtbot.mouseClick(panel.continue_button, LEFT)
    comp = cont.args[0].completions[0]
    qtbot.waitUntil(lambda: any(PROMPT_EVAL.search(x) for x in window.current.running_engine.log_tail()[before:]),
                    timeout=10_000)
    logged = [int(m.group(1)) for x in window.current.running_engine.log_tail()[before:]
              if (m := PROMPT_EVAL.search(x))]
    assert logged == [comp.prompt_processed]  # what the window reports is what the engine logged
    said = panel.result.text()
    assert (f"s2: {comp.prompt_cached:,} of {comp.prompt_tokens:,} prompt tokens reused from the cache, "
            f"{comp.prompt_processed:,} evaluated (slot {comp.slot})") in said
    assert comp.prompt_cached + comp.prompt_processed == comp.prompt_tokens
    # the CLI sees the window's sessions and continues one the same way
    monkeypatch.setenv("HEADROOM_CACHE_DIR", str(tmp_path))  # where this window keeps its session store
    capsys.readouterr()
    assert main(["sessions", "--url", url, "list"]) == 0
    listed = capsys.readouterr().out
    assert all(f"  {n} " in listed for n in ("s1", "s2", "s3")) and "2 turns" in listed
    assert main(["sessions", "--url", url, "continue", "s3", " and later", "--n-predict", "4"]) == 0
    assert "session s3: slot" in capsys.readouterr().out
    _stop(window, qtbot)
    QApplication.processEvents()
    assert panel.chosen.count() == 3  # the texts stay after the engine is gone


@pytest.mark.engine
def test_a_fresh_home_an_engine_file_a_model_measure_launch_and_a_reply(window, tiny_chat_model, engine_build,
                                                                        qtbot, tmp_path):
    """Issue 29's first run: nothing configured and no engine to find; the user picks an engine FILE
    (a copy of the build in a folder of their own), opens a real test model, presses Launch (which
    measures first) and gets a chat reply — no other setting touched."""
    import shutil

    from app.engine.discover import EngineOrigin

    assert window.state.last_model == "" and window.state.settings == {} and window.state.engine_path == ""
    window.launch.set_engines([])  # nothing found: no build in this fresh cache, none on PATH
    mine = tmp_path / "Downloads" / "llama" / "bin"
    shutil.copytree(engine_build.bin_dir, mine, symlinks=True)
    with qtbot.waitSignal(window.launch.enginesFound, timeout=120_000):
        window.use_engine_file(mine / "llama-server")  # File ▸ Choose engine…
    engine = window.current.engine
    assert engine is not None and engine.path == str(mine / "llama-server") and engine.source == EngineOrigin.SETTINGS
    with qtbot.waitSignal(window.planned):
        assert window.open_model(tiny_chat_model)  # File ▸ Open model…
    url = _launch(window, qtbot)  # Launch measures first (pass 1), then starts the chosen engine
    assert "measured by pass 1" in window.measure.status_text()
    assert url.startswith("http://127.0.0.1:")
    chat = window.chat
    chat.message.setText("Hello")
    with qtbot.waitSignal(chat.replyDone, timeout=120_000) as done:
        qtbot.mouseClick(chat.send_button, LEFT)
    outcome = done.args[0]
    assert outcome.error is None and outcome.replies[0].finished and outcome.replies[0].text, outcome
    _stop(window, qtbot)


@pytest.mark.engine
def test_opening_a_model_starts_pass_1_s_child_so_measure_waits_only_for_llama_cpp(window, tiny_model, engine_build,
                                                                                 qtbot, tmp_path):
    """Issue 30: pass 1 in the window within 1.2× of llama-fit-params (bench/bench_fit_params.py: 1.05×,
    where a fresh child's Python start made it 1.9×). Opening a model starts the child; Measure's pass 1
    is that child's, with the numbers a fresh child gives; the next one waits after it; closing the
    window ends it."""
    from app.engine.libpath import lib_dir_beside
    from app.engine.process import pid_alive
    from app.probe import measure as probe_measure
    from app.probe.measure import measure, waiting_ahead

    def waiting() -> int:
        return waiting_ahead() or 0

    import shutil

    model = tmp_path / tiny_model.name  # (a file of its own: no pass 1 cached for it by another test or run)
    shutil.copyfile(tiny_model, model)
    _engines(window, qtbot)
    with qtbot.waitSignal(window.planned):
        assert window.open_model(model)
    qtbot.waitUntil(lambda: waiting() != 0, timeout=30_000)
    first = waiting()
    child = probe_measure._AHEAD
    assert child is not None and child.proc.pid == first
    with qtbot.waitSignal(window.measure.measured, timeout=120_000) as done:
        qtbot.mouseClick(window.measure.button, LEFT)
    measured, settings = done.args
    assert "measured by pass 1" in window.measure.status_text()
    engine = window.current.engine
    assert engine is not None
    fresh = measure(model, settings, lib_dir=lib_dir_beside(engine.path))
    assert measured.devices == fresh.devices and measured.kv_total == fresh.kv_total
    qtbot.waitUntil(lambda: not pid_alive(first), timeout=10_000)
    assert child.proc.returncode == 0  # (it measured once, and ended: one put aside is killed)
    qtbot.waitUntil(lambda: waiting() not in (0, first), timeout=30_000)
    after = waiting()
    window.close()
    qtbot.waitUntil(lambda: not pid_alive(after), timeout=10_000)
    assert waiting_ahead() is None


@pytest.mark.engine
def test_a_model_opened_before_the_engine_was_found_gets_pass_1_s_child_once_it_is(window, tiny_model,
                                                                                  engine_build, qtbot):
    """`headroom gui MODEL` (or a restored model) opens it before engine discovery finishes: a
    walkthrough found no child waiting then, only after a model opened from the window. The first plan
    with both a model and an engine starts it; closing the window ends it."""
    from app.engine.process import pid_alive
    from app.probe.measure import stop_ahead, waiting_ahead

    stop_ahead()  # (one an earlier test's window left waiting: this process's, not this window's)
    window.launch.set_engines([])  # (none found yet)
    with qtbot.waitSignal(window.planned):
        assert window.open_model(tiny_model)
    assert waiting_ahead() is None  # (no engine: pass 1 has no libllama to run)
    _engines(window, qtbot)  # discovery lands: the plan is made again with the engine
    qtbot.waitUntil(lambda: waiting_ahead() is not None, timeout=30_000)
    child = waiting_ahead()
    assert child is not None
    window.close()
    qtbot.waitUntil(lambda: not pid_alive(child), timeout=10_000)
