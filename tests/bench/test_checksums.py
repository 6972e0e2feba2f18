"""bench.checksums against the published test vectors of SHA-256 (FIPS 180-2) and MD5 (RFC 1321) for "abc"."""

from __future__ import annotations

from pathlib import Path

from bench.checksums import CHUNK, Digest, digest_file, sha256

ABC_SHA256 = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
ABC_MD5 = "900150983cd24fb0d6963f7d28e17f72"


def test_known_vectors(tmp_path: Path) -> None:
    f = tmp_path / "abc"
    f.write_bytes(b"abc")
    d = digest_file(f)
    assert (d.size, d.sha256, d.md5) == (3, ABC_SHA256, ABC_MD5) and sha256(f) == ABC_SHA256


def test_streaming_over_chunk_boundaries_equals_one_pass(tmp_path: Path) -> None:
    data = bytes(range(256)) * (CHUNK // 256 * 2 + 3)  # two chunks and a bit
    f = tmp_path / "big"
    f.write_bytes(data)
    d = Digest()
    for i in range(0, len(data), 1000):
        d.update(data[i : i + 1000])
    assert (d.sha256, d.md5, d.size) == (sha256(f), digest_file(f).md5, len(data))


def test_mismatches_name_each_declared_property_that_differs() -> None:
    d = Digest()
    d.update(b"abc")
    assert d.mismatches(size=3, sha256=ABC_SHA256.upper(), md5=ABC_MD5) == []  # published sums may be upper case
    assert d.mismatches() == []  # nothing declared, nothing to contradict
    assert d.mismatches(size=4, md5="0" * 32) == ["size: expected 4, got 3", f"md5: expected {'0' * 32}, got {ABC_MD5}"]
