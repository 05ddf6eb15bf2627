"""The wheel's xz-packed artifacts (hatch_build.py) are read back exactly, and a damaged one is a clear error."""
from __future__ import annotations

import lzma
import shutil
from pathlib import Path

import pytest

import wattgpu.specs as specs
from wattgpu.errors import ArtifactError

from .helpers import REPO


def _package_copy(tmp_path: Path, packed: bytes | None) -> Path:
    """A stand-in package directory whose models/ holds only ``specs.json.xz`` (as an installed wheel does)."""
    pkg = tmp_path / "wattgpu"
    (pkg / "models").mkdir(parents=True)
    shutil.copy(specs.__file__, pkg / "specs.py")
    if packed is not None:
        (pkg / "models" / "specs.json.xz").write_bytes(packed)
    return pkg


def test_packed_artifact_reads_back_the_plain_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plain = (REPO / "runtime" / "wattgpu" / "models" / "specs.json").read_bytes()
    pkg = _package_copy(tmp_path, lzma.compress(plain))
    monkeypatch.setattr(specs, "__file__", str(pkg / "specs.py"))
    assert specs.packaged_bytes("specs.json") == plain


def test_damaged_packed_artifact_is_an_artifact_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = _package_copy(tmp_path, b"\xfd7zXZ\x00 not really xz")
    monkeypatch.setattr(specs, "__file__", str(pkg / "specs.py"))
    with pytest.raises(ArtifactError, match=r"specs\.json\.xz is damaged.*reinstall wattgpu"):
        specs.packaged_bytes("specs.json")


def test_packed_artifact_that_unpacks_too_far_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(specs, "MAX_PACKED_ARTIFACT_BYTES", 1000)
    bomb = lzma.compress(b"\0" * 100_000)
    with pytest.raises(ArtifactError, match="unpacks to more than 1000 bytes"):
        specs._unpack(bomb, "itl.onnx")


def test_truncated_packed_artifact_is_an_artifact_error() -> None:
    packed = lzma.compress(b"x" * 10_000 + bytes(range(256)) * 50)
    with pytest.raises(ArtifactError, match="damaged"):
        specs._unpack(packed[: len(packed) // 2], "power.onnx")
