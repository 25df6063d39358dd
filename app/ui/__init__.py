"""The PySide6 window. Only presentation and wiring; numbers come from app.planner."""
