"""One stream batcher for every panel (app/ui/workers.py ``StreamBatcher``): what a worker thread streams
reaches the GUI thread in batches, per key and in order; a finished reply takes what waits at once;
a new request drops what an old one left."""

from __future__ import annotations

import threading

from app.ui.workers import StreamBatcher


def test_pieces_from_a_thread_arrive_batched_per_key_and_in_order(qtbot) -> None:
    batcher = StreamBatcher()
    got: list[dict[object, list[str]]] = []
    batcher.flushed.connect(got.append)

    def stream() -> None:
        for i in range(200):
            batcher.add(i % 2, f"{i},")

    worker = threading.Thread(target=stream)
    worker.start()
    worker.join()
    qtbot.waitUntil(lambda: bool(got), timeout=5_000)
    batcher.stop()
    joined = {k: "".join(p for batch in got for p in batch.get(k, [])) for k in (0, 1)}
    assert joined[0] == "".join(f"{i}," for i in range(0, 200, 2))
    assert joined[1] == "".join(f"{i}," for i in range(1, 200, 2))
    assert len(got) < 200  # batched, not one signal a piece


def test_take_empties_it_now_and_clear_drops_what_waits(qtbot) -> None:
    batcher = StreamBatcher(interval_ms=60_000)  # no timer flush during the test
    batcher.add("s1", "Hel")
    batcher.add("s1", "lo")
    assert batcher.take() == {"s1": ["Hel", "lo"]} and batcher.take() == {}
    batcher.add("s2", "old reply")
    batcher.clear()
    with qtbot.assertNotEmitted(batcher.flushed, wait=0):
        batcher.flush()
    batcher.stop()
