"""Help ▸ Glossary, Open the log folder, About (issue 46: there was no Help menu), and the window's words:
its warnings point at its own buttons, not at commands, and the glossary is the one docs/glossary.md is."""

from __future__ import annotations

from pathlib import Path

from app import glossary
from app.ui.application import open_first

ROOT = Path(__file__).resolve().parents[2]


def test_the_help_menu_explains_the_words_and_the_glossary_is_the_docs(window, qtbot):
    menus = [a.text() for a in window.menuBar().actions()]
    assert menus == ["&File", "&Help"]
    help_menu = window.menuBar().actions()[1].menu()
    assert [a.text() for a in help_menu.actions() if a.text()] == ["&Glossary…", "Open the &log folder",
                                                                   "&About Headroom"]
    help_menu.actions()[0].trigger()
    qtbot.waitUntil(window.glossary.isVisible)
    text = window.glossary.text.toPlainText()
    for term in ("pass 1", "resident window", "host tail", "pinned memory", "prompt cache", "-ngl", "tok/s"):
        assert term in text
    assert (ROOT / "docs" / "glossary.md").read_text() == glossary.markdown()  # `python -m app.glossary` made it
    assert window.measure.button.toolTip() == glossary.explain("pass 1")


def test_the_windows_warnings_point_at_its_buttons(window, qtbot):
    with qtbot.waitSignal(window.planned):
        open_first(window, None, demo=True)  # an estimated plan: it says how to measure
    shown = window.budget.warnings.text()
    assert "press Measure (pass 1) for measured numbers" in shown
    assert "headroom measure" not in shown
