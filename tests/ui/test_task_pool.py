"""One task pool for every panel (app/ui/workers.py ``TaskPool``): an answer reaches the GUI thread
unless its task was cancelled or replaced; closing waits for every task, so Qt never destroys a
thread still running; a task that may outlive its window is waited for a little, then left to end."""

from __future__ import annotations

import threading

from app.ui.qt import QObject
from app.ui.workers import ABANDONED, Abandon, TaskPool


def test_an_answer_arrives_on_the_gui_thread_and_a_failure_as_its_message(qtbot) -> None:
    pool, owner = TaskPool(), QObject()
    got: list[tuple[str, object, threading.Thread]] = []
    pool.run(lambda _c: 42, lambda r: got.append(("ok", r, threading.current_thread())), owner=owner)
    qtbot.waitUntil(lambda: len(got) == 1, timeout=5_000)

    def broken(_c: threading.Event) -> object:
        raise OSError("disk full")

    pool.run(broken, failed=lambda m: got.append(("failed", m, threading.current_thread())), owner=owner)
    qtbot.waitUntil(lambda: len(got) == 2 and not pool.busy(), timeout=5_000)
    assert [(kind, value) for kind, value, _t in got] == [("ok", 42), ("failed", "disk full")]
    assert all(t is threading.main_thread() for _k, _v, t in got)


def test_a_task_started_again_for_its_key_replaces_the_one_before_whose_answer_is_dropped(qtbot) -> None:
    pool, owner = TaskPool(), QObject()
    gate, answers = threading.Event(), list[str]()

    def slow(_c: threading.Event) -> str:
        gate.wait(10)
        return "old"

    first = pool.run(slow, answers.append, owner=owner, key="scan")
    second = pool.run(lambda _c: "new", answers.append, owner=owner, key="scan")
    assert first.cancelled and pool.current(owner, "scan") is second
    qtbot.waitUntil(lambda: answers == ["new"], timeout=5_000)
    gate.set()
    qtbot.waitUntil(lambda: not pool.busy(owner), timeout=5_000)
    assert answers == ["new"] and pool.current(owner, "scan") is None


def test_closing_cancels_and_waits_for_every_panels_tasks(qtbot) -> None:
    pool, launch, chat = TaskPool(), QObject(), QObject()
    started, answers = threading.Barrier(3), list[str]()

    def until_cancelled(cancel: threading.Event) -> str:
        started.wait(5)
        cancel.wait(10)
        return "late"

    tasks = [pool.run(until_cancelled, answers.append, owner=o) for o in (launch, chat)]
    started.wait(5)
    pool.cancel(chat)
    assert tasks[1].cancelled and not tasks[0].cancelled  # one panel's Cancel leaves the other's task
    pool.close()
    assert all(t.isFinished() for t in tasks)  # nothing left running when the window goes
    qtbot.wait(50)
    assert answers == []  # cancelled: no late answer reaches a closed window


def test_a_task_that_may_outlive_the_window_is_waited_for_a_little_then_left_to_end(qtbot) -> None:
    pool, owner, gate = TaskPool(), QObject(), threading.Event()
    task = pool.run(lambda _c: gate.wait(30), owner=owner, abandon=Abandon(wait_ms=50, exit_wait_s=30))
    pool.close()  # returns after about 50 ms: the task still waits on its "network"
    assert task.isRunning() and task in ABANDONED and not pool.busy()
    gate.set()
    qtbot.waitUntil(task.isFinished, timeout=5_000)
