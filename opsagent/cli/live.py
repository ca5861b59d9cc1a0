"""The live view of an investigation on the terminal, redrawn as the loop reports."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text


class LiveView:
    """Hypotheses and their progress, redrawn as the loop reports."""

    def __init__(self, console: Console) -> None:
        self.rows: dict[str, dict[str, str]] = {}
        self.live = Live(self._table(), console=console, refresh_per_second=8, transient=False)

    def _table(self) -> Table:
        t = Table(title="verifying hypotheses", expand=True)
        for col in ("hypothesis", "steps", "status", "last action"):
            t.add_column(col, overflow="fold")
        for hid, row in self.rows.items():
            t.add_row(*(Text(x) for x in (hid, row.get("steps", "0"), row.get("status", "…"), row.get("action", ""))))
        return t

    def __call__(self, event: str, fields: dict[str, Any]) -> None:
        row = self.rows.setdefault(str(fields.get("id")), {})
        if event == "step":
            row["steps"] = str(fields.get("steps"))
            row["action"] = str(fields.get("action"))
        elif event == "verdict":
            row["status"] = str(fields.get("status"))
        self.live.update(self._table())
