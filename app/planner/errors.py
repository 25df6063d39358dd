"""Errors the planner raises. Every message names the problem a user can act on."""

from app.text import printable


class PlannerError(Exception):
    """A model, setting or measurement the planner cannot use; the message says why."""


class NotModelled(PlannerError):
    """The engine knows this architecture but the planner does not model it yet."""

    def __init__(self, arch: str, detail: str = "") -> None:
        self.arch = arch
        # ``arch`` is the file's general.architecture: printed with its control characters escaped.
        super().__init__(f"not modelled: {printable(arch)}" + (f" ({detail})" if detail else ""))
