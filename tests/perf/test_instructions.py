"""The callgrind report: which dump is read, and the ratios it prints."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.instructions import _counted, render


def test_the_dump_with_the_label_is_read(tmp_path: Path) -> None:
    out = tmp_path / "callgrind.x.out"
    out.write_text("desc: Trigger: Program termination\nsummary: 999\n")
    (tmp_path / "callgrind.x.out.1").write_text("desc: Trigger: dump s2\nsummary: 2000\n")
    (tmp_path / "callgrind.x.out.2").write_text("desc: Trigger: dump s4\ntotals: 3000\n")
    assert _counted(str(out), "s2") == 2000
    assert _counted(str(out), "s4") == 3000
    with pytest.raises(RuntimeError, match="s6"):
        _counted(str(out), "s6")


def test_the_report_gives_ratios_to_the_sdk_and_to_the_floor() -> None:
    rows = {
        "acp-agent": {"s2": 200_000.0, "s4": 150_000.0},
        "sdk": {"s2": 500_000.0, "s4": 300_000.0},
        "floor": {"s2": 100_000.0, "s4": 50_000.0},
    }
    report = render(rows, 12.0, "python -m benchmarks.instructions")
    s2 = next(line for line in report.splitlines() if line.startswith("| S2 "))
    s4 = next(line for line in report.splitlines() if line.startswith("| S4 "))
    # agents, then each one's ratio to the sdk, then to the floor
    assert s2.endswith("| 200,000 | 500,000 | 100,000 | 0.40x | 0.20x | 2.00x | 5.00x |")
    assert s4.endswith("| 150,000 | 300,000 | 50,000 | 0.50x | 0.17x | 3.00x | 6.00x |")
