"""What every bench needs to make its record: where results go, which code and machine were
measured, CPU time read from ``/proc``, and the Markdown table the numbers are printed in."""

from __future__ import annotations

import json
import os
import platform
import subprocess
from collections.abc import Iterable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = ROOT / "bench" / "results"
"""Gitignored: the numbers worth keeping are copied into ``bench/README.md`` with their date."""


def results_path(name: str) -> Path:
    """The default place of a bench's JSON record, whatever the working directory."""
    return RESULTS_DIR / name


def write_json(path: Path, record: dict[str, Any]) -> None:
    """Write a bench's full record, creating ``path``'s folder if needed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2) + "\n")


def source_version() -> str:
    """The commit measured (the code under test changes), ``+dirty`` if tracked files differ."""
    commit = _git("rev-parse", "--short", "HEAD") or "unknown"
    return f"{commit}+dirty" if _git("status", "--porcelain", "--untracked-files=no") else commit


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()


def machine(packages: Iterable[str]) -> dict[str, Any]:
    """The CPUs, OS, Python and the versions of ``packages``: what a number was measured on."""
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text()
                  .splitlines() if line.startswith("model name")), platform.processor())
    return {"cpus": os.cpu_count(), "cpu_model": model, "platform": platform.platform(),
            "python": platform.python_version(),
            "packages": {name: metadata.version(name) for name in packages}}


def process_cpu_s(pid: int) -> float:
    """User plus system CPU seconds of a process so far, from /proc (10 ms resolution)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # stat fields 14, 15


def cpu_busy_s(cpu: int) -> float:
    """Seconds CPU ``cpu`` was not idle since boot, whoever used it, from /proc/stat (10 ms
    resolution)."""
    prefix = f"cpu{cpu} "
    line = next(line for line in Path("/proc/stat").read_text().splitlines()
                if line.startswith(prefix))
    ticks = [int(field) for field in line.split()[1:9]]  # user nice system idle iowait irq softirq steal
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def format_table(header: Sequence[str], rows: Iterable[Sequence[str]], left_columns: int = 1) -> str:
    """A Markdown table with padded columns, readable in a terminal and pasteable into the README;
    the first ``left_columns`` columns are left-aligned, the rest (numbers) right-aligned."""
    cells = [tuple(header), *(tuple(row) for row in rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines = ["| " + " | ".join(cell.ljust(w) if i < left_columns else cell.rjust(w)
                               for i, (cell, w) in enumerate(zip(row, widths, strict=True))) + " |"
             for row in cells]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)
