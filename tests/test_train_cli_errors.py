"""wattgpu-train fails like wattgpu: one ``error:`` line and an exit status, never a traceback, and an
output path that cannot be written is refused before any training."""
from __future__ import annotations

import time

from click.testing import CliRunner

from wattgpu_train.cli import main

from .helpers import REPO


def _run(*args: str):
    return CliRunner().invoke(main, list(args))


def test_a_file_that_is_not_watt_counts_is_one_line_exit_2(tmp_path) -> None:
    for name, data in (("other.csv", b"a,b\n1,2\n"), ("binary.csv", bytes(range(1, 256))),
                       ("ours.csv", b"llm,gpu\nmeta-llama/Llama-3.1-8B-Instruct,NVIDIA A30\n")):
        f = tmp_path / name
        f.write_bytes(data)
        r = _run("fit", "--data-dir", str(REPO / "data"), "--specs", str(REPO / "specs.json"), "--watt-counts", str(f),
                 "--out", str(tmp_path / "out"), "--trees", "2", "--no-intervals")
        assert r.exit_code == 2, (name, r.output)
        assert r.stderr.startswith(f"error: {f}") and r.stderr.count("\n") == 1, r.stderr
        assert "Traceback" not in r.output


def test_output_that_is_not_a_directory_is_refused_before_training(tmp_path) -> None:
    start = time.perf_counter()
    r = _run("fit", "--data-dir", str(REPO / "data"), "--specs", str(REPO / "specs.json"), "--out", "/dev/null",
             "--trees", "2", "--no-intervals")
    assert r.exit_code == 2 and "exists and is not a directory" in r.stderr
    assert "measured rows" not in r.stderr and time.perf_counter() - start < 30  # nothing was fitted


def test_missing_catalog_tables_are_one_line(tmp_path) -> None:
    r = _run("sync-catalog", "--catalog-dir", str(tmp_path / "nope"), "--paper-dir", str(tmp_path / "nope"),
             "--specs", str(tmp_path / "s.json"), "--models", str(tmp_path / "m"), "--no-golden")
    assert r.exit_code == 2 and r.stderr.startswith("error: ") and r.stderr.count("\n") == 1, r.stderr
    assert "No such file or directory" in r.stderr
