"""The benchmark scripts' sections of reports/benchmarks.md: each script rewrites its own section between its
markers, and adds it before any heading or other section when the file has none, so a rewrite by one script
never drops another's (bench_service's rewrite once dropped the bench_runtime section placed inside it)."""
from __future__ import annotations

import sys
from pathlib import Path

from .helpers import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
from bench_service import write_report  # noqa: E402  (stdlib only at import)

RUNTIME = ("<!-- bench_runtime:start -->", "<!-- bench_runtime:end -->")
SERVICE = ("<!-- bench_service:start -->", "<!-- bench_service:end -->")


def _section(markers: tuple[str, str], body: str) -> str:
    return f"{markers[0]}\n## {body}\n{markers[1]}"


def test_a_new_section_lands_before_another_scripts_section_and_survives_its_rewrite(tmp_path: Path) -> None:
    report = tmp_path / "benchmarks.md"
    report.write_text("# Runtime benchmarks\n\nHow to run.\n\n" + _section(SERVICE, "service v1") + "\n\n## Older notes\n",
                      encoding="utf-8")
    write_report(report, _section(RUNTIME, "runtime v1"), *RUNTIME)
    text = report.read_text(encoding="utf-8")
    assert text.index(RUNTIME[1]) < text.index(SERVICE[0])  # not inside the service section
    write_report(report, _section(SERVICE, "service v2"), *SERVICE)
    write_report(report, _section(RUNTIME, "runtime v2"), *RUNTIME)
    text = report.read_text(encoding="utf-8")
    assert "runtime v2" in text and "service v2" in text and "## Older notes" in text
    assert "v1" not in text and text.count(RUNTIME[0]) == 1 and text.count(SERVICE[0]) == 1
    assert text.startswith("# Runtime benchmarks\n\nHow to run.\n\n" + RUNTIME[0])


def test_a_section_goes_after_the_title_of_a_file_without_headings(tmp_path: Path) -> None:
    report = tmp_path / "benchmarks.md"
    report.write_text("# Title\n\nText.\n", encoding="utf-8")
    write_report(report, _section(SERVICE, "service"), *SERVICE)
    assert report.read_text(encoding="utf-8") == "# Title\n\nText.\n\n" + _section(SERVICE, "service") + "\n\n"
    missing = tmp_path / "new.md"
    write_report(missing, _section(SERVICE, "service"), *SERVICE)
    assert missing.read_text(encoding="utf-8").strip() == _section(SERVICE, "service")
