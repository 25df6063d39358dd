"""Panels expose methods and signals, not their child widgets (docs/style.md, "One state, many views"):
the window's code names, on each panel, only what the panel's class itself defines — a method, a
property or a signal — never a widget the panel built for itself."""

from __future__ import annotations

import ast
from pathlib import Path

from app.ui.budget_view import BudgetView
from app.ui.chat_panel import ChatPanel
from app.ui.context_chart import ContextChart
from app.ui.devices_panel import DevicesPanel
from app.ui.launch_panel import LaunchPanel
from app.ui.live_view import LiveView
from app.ui.measure_bar import MeasureBar
from app.ui.server_panel import ServerPanel
from app.ui.sessions_panel import SessionsPanel
from app.ui.settings_panel import SettingsPanel

UI = Path(__file__).resolve().parents[2] / "app" / "ui"
#: The window's attribute for each panel.
PANELS = {"settings": SettingsPanel, "measure": MeasureBar, "launch": LaunchPanel, "budget": BudgetView,
          "devices": DevicesPanel, "sessions": SessionsPanel, "server": ServerPanel, "chart": ContextChart,
          "live_view": LiveView, "chat": ChatPanel}
#: How each file names the window: ``self`` in the window, ``window``/``self.window`` outside it.
WINDOW_NAMES = {"main_window.py": ("self",), "application.py": ("window", "self.window")}


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return "?"


def reach_ins(path: Path, window_names: tuple[str, ...]) -> list[str]:
    """``<window>.<panel>.<member>`` where ``member`` is not defined by the panel's class."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Attribute) or not isinstance(node.value, ast.Attribute):
            continue
        owner, panel = _dotted(node.value.value), node.value.attr
        cls = PANELS.get(panel)
        if owner in window_names and cls is not None and not hasattr(cls, node.attr):
            found.append(f"{path.name}:{node.lineno} {owner}.{panel}.{node.attr}")
    return found


def test_the_window_uses_only_what_each_panel_class_defines() -> None:
    bad = [hit for name, owners in WINDOW_NAMES.items() for hit in reach_ins(UI / name, owners)]
    assert bad == []


def test_the_rule_reader_sees_a_child_widget(tmp_path: Path) -> None:
    src = tmp_path / "w.py"
    src.write_text("class W:\n    def f(self):\n        self.measure.button.click()\n"
                   "        self.measure.measured.connect(print)\n        self.launch.bind(None)\n")
    assert reach_ins(src, ("self",)) == ["w.py:3 self.measure.button"]
