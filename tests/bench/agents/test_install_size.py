"""``bench agents install`` says how big each CLI is: the bytes on disk as ``du -s`` counts them, each file once
(npm links Claude Code's 245 MB binary twice by hard link: it was reported as 491 MB), symbolic links not
followed. Checked against coreutils' du on a generated folder."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from bench.agents.install import du

MIB = 2**20


@pytest.mark.skipif(shutil.which("du") is None, reason="no du here to compare with")
def test_a_hard_link_counts_once_and_a_symbolic_link_is_not_followed(tmp_path):
    folder = tmp_path / "cli"
    (folder / "bin").mkdir(parents=True)
    (folder / "lib").mkdir()
    (folder / "lib" / "claude").write_bytes(os.urandom(3 * MIB))
    os.link(folder / "lib" / "claude", folder / "bin" / "claude.exe")  # the same inode under a second name
    outside = tmp_path / "big"
    outside.write_bytes(os.urandom(5 * MIB))
    (folder / "bin" / "big").symlink_to(outside)  # a link out of the folder: its target is not the folder's
    (folder / "small.json").write_text('{"name": "x"}')

    size = du(folder)
    seen = subprocess.run(["du", "-s", "--block-size=1", str(folder)], capture_output=True, text=True, check=True)
    assert size == int(seen.stdout.split()[0])  # what du says, to the byte
    assert 3 * MIB <= size < 4 * MIB  # the 3 MiB file once (not 6), the 5 MiB target not at all
