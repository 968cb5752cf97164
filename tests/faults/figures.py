"""Tables of measured figures, recorded by the fault tests and written once per session."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

OUT_DIR = Path("faults-out")


class Figures:
    """Rows of named tables; a row is a mapping of column to value, in insertion order."""

    def __init__(self) -> None:
        self._tables: dict[str, list[dict[str, Any]]] = defaultdict(list)

    def record(self, table: str, **row: Any) -> None:
        self._tables[table].append(dict(row))

    def tables(self) -> Mapping[str, list[dict[str, Any]]]:
        return self._tables

    def write(self, out_dir: Path = OUT_DIR) -> list[Path]:
        """One `<table>.json` per table (merged with what an earlier run of another module
        wrote there, row for row by the first column); returns the files written."""
        out_dir.mkdir(parents=True, exist_ok=True)
        written = []
        for table, rows in self._tables.items():
            path = out_dir / f"{table}.json"
            written.append(path)
            path.write_text(json.dumps(merge(_read(path), rows), indent=2) + "\n")
        return written


def merge(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`old` with each row that `new` has for the same key (its first column) replaced."""
    if not new:
        return old
    key = next(iter(new[0]))
    replaced = {str(row.get(key)) for row in new}
    return [row for row in old if str(row.get(key)) not in replaced] + new


def _read(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    rows = json.loads(path.read_text())
    return rows if isinstance(rows, list) else []


def markdown(table: str, rows: list[dict[str, Any]]) -> str:
    """The table in Markdown, with a heading line naming it."""
    if not rows:
        return f"### {table}\n\n(no rows)\n"
    columns: list[str] = []
    for row in rows:
        columns += [c for c in row if c not in columns]
    lines = [f"### {table}", "", "| " + " | ".join(columns) + " |"]
    lines.append("|" + "|".join(":--" if i == 0 else "--:" for i in range(len(columns))) + "|")
    for row in rows:
        lines.append("| " + " | ".join(_cell(row.get(c, "")) for c in columns) + " |")
    return "\n".join(lines) + "\n"


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    return str(value)


def main(out_dir: Path = OUT_DIR) -> None:
    """Print every table written under `out_dir`."""
    for path in sorted(out_dir.glob("*.json")):
        print(markdown(path.stem, _read(path)))


if __name__ == "__main__":
    main()
