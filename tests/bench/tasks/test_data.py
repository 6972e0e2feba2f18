"""Tests for bench.tasks.data: fetching and verifying raw files, and building prepared data atomically.

Everything runs offline against a folder mirror or a local HTTP server on 127.0.0.1, except the one
test marked ``mirror``, which needs the real data files through ``BENCH_DATA_MIRROR``.
"""

from __future__ import annotations

import functools
import hashlib
import http.server
import json
import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.tasks import DataSource, Task, TaskError, get_task
from bench.tasks.data import (
    DataError,
    data_status,
    fetch,
    fetch_tree,
    is_prepared,
    mirror_root,
    partial_notes,
    prepare,
    prepared_dir,
    raw_dir,
)

PAYLOAD = b"date,value\n" + b"".join(f"2020-01-{d:02d},{d * 1.5}\n".encode() for d in range(1, 29))
SHA256 = hashlib.sha256(PAYLOAD).hexdigest()
MD5 = hashlib.md5(PAYLOAD).hexdigest()


def make_source(**overrides: object) -> DataSource:
    fields: dict[str, object] = dict(
        file="series.csv",
        url="https://example.invalid/toy/series.csv",
        mirror="toy/series.csv",
        sha256=SHA256,
        md5=MD5,
        size=len(PAYLOAD),
    )
    fields.update(overrides)
    return DataSource(**fields)  # type: ignore[arg-type]


def names(folder: Path) -> list[str]:
    """Everything in a folder, hidden temporary files included."""
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


@pytest.fixture
def mirror(tmp_path: Path) -> Path:
    root = tmp_path / "mirror"
    (root / "toy").mkdir(parents=True)
    (root / "toy" / "series.csv").write_bytes(PAYLOAD)
    return root


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    """A plain HTTP server on 127.0.0.1 serving tmp_path/www; yields its base URL."""
    www = tmp_path / "www"
    www.mkdir()
    (www / "series.csv").write_bytes(PAYLOAD)

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(www)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


# --- fetch through a mirror -------------------------------------------------------------------------------


def test_mirror_root_reads_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("BENCH_DATA_MIRROR", raising=False)
    assert mirror_root() is None
    monkeypatch.setenv("BENCH_DATA_MIRROR", str(tmp_path))
    assert mirror_root() == tmp_path.resolve()


def test_fetch_from_mirror_copies_and_verifies(tmp_path: Path, mirror: Path) -> None:
    dest = tmp_path / "raw"
    path = fetch(make_source(), dest, mirror=mirror, progress=False)
    assert path == dest / "series.csv"
    assert path.read_bytes() == PAYLOAD
    assert names(dest) == ["series.csv"]


def test_second_fetch_does_no_work(tmp_path: Path, mirror: Path) -> None:
    dest = tmp_path / "raw"
    path = fetch(make_source(), dest, mirror=mirror, progress=False)
    os.utime(path, ns=(1_000_000_000, 1_000_000_000))  # an old mtime, so that any rewrite would show
    before = path.stat()
    (mirror / "toy" / "series.csv").unlink()  # a copy attempt would now fail
    assert fetch(make_source(), dest, mirror=mirror, progress=False) == path
    after = path.stat()
    assert (after.st_mtime_ns, after.st_ino) == (before.st_mtime_ns, before.st_ino)


@pytest.mark.parametrize(
    ("field", "wrong", "actual"),
    [("sha256", "0" * 64, SHA256), ("md5", "f" * 32, MD5), ("size", len(PAYLOAD) + 7, len(PAYLOAD))],
)
def test_checksum_mismatch_raises_and_leaves_nothing(
    tmp_path: Path, mirror: Path, field: str, wrong: object, actual: object
) -> None:
    dest = tmp_path / "raw"
    with pytest.raises(DataError) as err:
        fetch(make_source(**{field: wrong}), dest, mirror=mirror, progress=False)
    message = str(err.value)
    assert f"expected {wrong}" in message and f"got {actual}" in message
    assert "changed or is corrupt" in message
    assert names(dest) == []  # neither the file nor a temporary file


@pytest.mark.parametrize("corruption", [b"X" * len(PAYLOAD), PAYLOAD[:10]], ids=["same-size", "truncated"])
def test_corrupted_existing_file_is_refetched(tmp_path: Path, mirror: Path, corruption: bytes) -> None:
    dest = tmp_path / "raw"
    dest.mkdir()
    (dest / "series.csv").write_bytes(corruption)
    path = fetch(make_source(), dest, mirror=mirror, progress=False)
    assert path.read_bytes() == PAYLOAD
    assert names(dest) == ["series.csv"]


def test_missing_mirror_file_says_what_to_do(tmp_path: Path) -> None:
    empty = tmp_path / "empty-mirror"
    empty.mkdir()
    dest = tmp_path / "raw"
    with pytest.raises(DataError) as err:
        fetch(make_source(), dest, mirror=empty, progress=False)
    message = str(err.value)
    assert str(empty / "toy" / "series.csv") in message
    assert "https://example.invalid/toy/series.csv" in message and str(dest / "series.csv") in message
    assert "BENCH_DATA_MIRROR" in message
    assert names(dest) == []


# --- fetch by download --------------------------------------------------------------------------------------


def test_download_over_http(tmp_path: Path, server: str, capsys: pytest.CaptureFixture[str]) -> None:
    dest = tmp_path / "raw"
    path = fetch(make_source(url=f"{server}/series.csv"), dest)  # progress on; stderr is not a tty here
    assert path.read_bytes() == PAYLOAD
    assert names(dest) == ["series.csv"]
    assert capsys.readouterr().err.count("\n") == 1  # one line, not a progress bar


def test_download_404_raises_and_leaves_nothing(tmp_path: Path, server: str) -> None:
    dest = tmp_path / "raw"
    url = f"{server}/no-such-file.csv"
    with pytest.raises(DataError) as err:
        fetch(make_source(url=url), dest, progress=False)
    message = str(err.value)
    assert "404" in message and f"download it by hand from {url}" in message and "BENCH_DATA_MIRROR" in message
    assert names(dest) == []


def test_download_network_error_raises_and_leaves_nothing(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port that was free a moment ago: the connection is refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dest = tmp_path / "raw"
    with pytest.raises(DataError, match="download it by hand"):
        fetch(make_source(url=f"http://127.0.0.1:{port}/series.csv"), dest, progress=False)
    assert names(dest) == []


def test_download_with_wrong_checksum(tmp_path: Path, server: str) -> None:
    dest = tmp_path / "raw"
    with pytest.raises(DataError, match=f"got {SHA256}"):
        fetch(make_source(url=f"{server}/series.csv", sha256="1" * 64), dest, progress=False)
    assert names(dest) == []


# --- prepare ---------------------------------------------------------------------------------------------

PREPARE_OK = """
import argparse, pathlib, shutil
p = argparse.ArgumentParser()
p.add_argument("--prepare", action="store_true")
p.add_argument("--raw-dir", required=True)
p.add_argument("--data-dir", required=True)
a = p.parse_args()
with open("runs.log", "a") as f:  # cwd is the task folder: count the runs there
    f.write("run\\n")
shutil.copy(pathlib.Path(a.raw_dir) / "series.csv", pathlib.Path(a.data_dir) / "series.csv")
print("prepared into", a.data_dir)
"""

PREPARE_FAIL = """
import pathlib, sys
data_dir = pathlib.Path(sys.argv[sys.argv.index("--data-dir") + 1])
(data_dir / "half-written.npy").write_bytes(b"x")
print("boom: cannot parse series.csv", file=sys.stderr)
sys.exit(1)
"""


def make_task(root: Path, prepare_py: str, extra_data: str = "") -> Task:
    folder = root / "tasks" / "t9_toy"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "task.toml").write_text(
        'id = "t9"\ntitle = "Toy"\ndataset = "toy series"\nbudget_minutes = 1\nmetric = "mse"\n'
        'direction = "min"\neval_split = "test"\nbaseline_score = 1.0\n\n'
        f'[[data]]\nfile = "series.csv"\nurl = "https://example.invalid/toy/series.csv"\n'
        f'mirror = "toy/series.csv"\nsha256 = "{SHA256}"\nmd5 = "{MD5}"\nsize = {len(PAYLOAD)}\n' + extra_data
    )
    (folder / "prepare.py").write_text(prepare_py)
    (folder / "program.md").write_text("# toy\n")
    (folder / "train.py").write_text("print('train')\n")
    return get_task("t9")


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, mirror: Path) -> Path:
    monkeypatch.setenv("BENCH_TASKS_DIR", str(tmp_path / "tasks"))
    monkeypatch.setenv("BENCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("BENCH_DATA_MIRROR", str(mirror))
    return tmp_path


def runs(task: Task) -> int:
    log = task.folder / "runs.log"
    return len(log.read_text().splitlines()) if log.exists() else 0


def test_prepare_builds_marks_and_then_does_nothing(env: Path) -> None:
    task = make_task(env, PREPARE_OK)
    assert data_status(task) == "missing"
    out = prepare(task, progress=False)
    assert out == prepared_dir(task) == env / "cache" / "prepared" / "t9_toy"
    assert (out / "series.csv").read_bytes() == PAYLOAD
    assert (raw_dir(task) / "series.csv").read_bytes() == PAYLOAD
    marker = json.loads((out / ".complete").read_text())
    assert marker["task"] == "t9"
    assert marker["prepare_sha256"] == hashlib.sha256((task.folder / "prepare.py").read_bytes()).hexdigest()
    assert marker["sources"]["series.csv"] == {"sha256": SHA256, "md5": MD5, "size": len(PAYLOAD)}
    assert is_prepared(task) and data_status(task) == "prepared"
    assert names(out.parent) == ["t9_toy"]  # no temporary or old folders beside it
    assert runs(task) == 1

    assert prepare(task, progress=False) == out
    assert runs(task) == 1  # up to date: the script did not run again

    prepare(task, force=True, progress=False)
    assert runs(task) == 2 and is_prepared(task)
    assert names(out.parent) == ["t9_toy"]


def test_prepare_reruns_when_prepare_py_changes(env: Path) -> None:
    task = make_task(env, PREPARE_OK)
    prepare(task, progress=False)
    (task.folder / "prepare.py").write_text(PREPARE_OK + "# edited\n")
    assert not is_prepared(task) and data_status(task) == "raw"
    prepare(task, progress=False)
    assert runs(task) == 2 and is_prepared(task)


def test_failing_prepare_leaves_no_prepared_dir(env: Path) -> None:
    task = make_task(env, PREPARE_FAIL)
    with pytest.raises(DataError) as err:
        prepare(task, progress=False)
    assert "boom: cannot parse series.csv" in str(err.value) and "status 1" in str(err.value)
    assert not prepared_dir(task).exists()
    assert names(prepared_dir(task).parent) == []  # the temporary folder is gone too
    assert not is_prepared(task)


def test_failing_rebuild_keeps_the_previous_data(env: Path) -> None:
    task = make_task(env, PREPARE_OK)
    out = prepare(task, progress=False)
    (task.folder / "prepare.py").write_text(PREPARE_FAIL)
    with pytest.raises(DataError, match="boom"):
        prepare(task, progress=False)
    assert (out / "series.csv").read_bytes() == PAYLOAD and not (out / "half-written.npy").exists()
    assert names(out.parent) == ["t9_toy"]
    assert not is_prepared(task)  # built by another prepare.py: not trusted


def test_missing_optional_source_is_skipped(env: Path) -> None:
    optional = '\n[[data]]\nfile = "extra.csv"\nurl = "https://example.invalid/extra.csv"\nmirror = "toy/extra.csv"\n'
    task = make_task(env, PREPARE_OK, extra_data=optional + "required = false\n")
    fetch(task.data[0], raw_dir(task), mirror=mirror_root(), progress=False)
    assert data_status(task) == "raw"  # an optional file is not needed: the data are not partial without it
    out = prepare(task, progress=False)
    assert json.loads((out / ".complete").read_text())["absent_optional"] == ["extra.csv"]
    assert data_status(task) == "prepared"


def test_missing_required_source_fails_before_preparing(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    task = make_task(env, PREPARE_OK)
    monkeypatch.setenv("BENCH_DATA_MIRROR", str(env / "nowhere"))
    with pytest.raises(DataError, match="BENCH_DATA_MIRROR"):
        prepare(task, progress=False)
    assert runs(task) == 0 and not prepared_dir(task).exists()


# --- the real data ---------------------------------------------------------------------------------------


@pytest.mark.mirror
def test_real_mirror_etth1(tmp_path: Path) -> None:
    mirror = mirror_root()
    if mirror is None:
        pytest.skip("BENCH_DATA_MIRROR is not set: no local copy of the real data files (e.g. shared/data)")
    source = DataSource(
        file="ETTh1.csv",
        url="https://raw.githubusercontent.com/zhouhaoyi/ETDataset/main/ETT-small/ETTh1.csv",
        mirror="ETTh1/ETTh1.csv",
        sha256="f18de3ad269cef59bb07b5438d79bb3042d3be49bdeecf01c1cd6d29695ee066",
        md5="8381763947c85f4be6ac456c508460d6",
        size=2589657,
    )
    path = fetch(source, tmp_path, mirror=mirror, progress=False)
    data = path.read_bytes()
    assert len(data) == source.size
    assert hashlib.sha256(data).hexdigest() == source.sha256
    assert hashlib.md5(data).hexdigest() == source.md5
    assert fetch(source, tmp_path, mirror=mirror, progress=False) == path  # verifies in place, no copy


# --- partial substitutes and manifest folders --------------------------------------------------------------

PREPARE_EITHER = """
import argparse, json, pathlib, shutil
p = argparse.ArgumentParser()
p.add_argument("--prepare", action="store_true")
p.add_argument("--raw-dir", required=True)
p.add_argument("--data-dir", required=True)
a = p.parse_args()
raw, out = pathlib.Path(a.raw_dir), pathlib.Path(a.data_dir)
full = (raw / "full.csv").is_file()
shutil.copy(raw / ("full.csv" if full else "series.csv"), out / "series.csv")
notes = [] if full else ["only the January rows (mirror subset)"]
(out / "meta.json").write_text(json.dumps({"partial_data": notes}))
"""


def substitute_task(root: Path, subs: str) -> Task:
    """A task whose full file is absent from the mirror; ``subs`` declares its partial substitutes."""
    folder = root / "tasks" / "t9_toy"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "task.toml").write_text(
        'id = "t9"\ntitle = "Toy"\ndataset = "toy"\nbudget_minutes = 1\nmetric = "mse"\ndirection = "min"\n'
        'eval_split = "test"\nbaseline_score = 1.0\n\n'
        '[[data]]\nfile = "full.csv"\nurl = ""\nmirror = "toy/full.csv"\nsha256 = "' + "0" * 64 + '"\n' + subs
    )
    (folder / "prepare.py").write_text(PREPARE_EITHER)
    (folder / "program.md").write_text("# toy\n")
    (folder / "train.py").write_text("print('train')\n")
    return get_task("t9")


SUBSTITUTE = f'\n[[data]]\nfile = "series.csv"\nurl = ""\nmirror = "toy/series.csv"\nsha256 = "{SHA256}"\n'


def test_substitute_is_used_when_the_full_file_is_unavailable(env: Path) -> None:
    task = substitute_task(env, SUBSTITUTE + 'substitute_for = "full.csv"\n')
    assert data_status(task) == "missing"
    out = prepare(task, progress=False)
    assert (out / "series.csv").read_bytes() == PAYLOAD
    assert json.loads((out / ".complete").read_text())["substituted"] == ["full.csv"]
    assert partial_notes(task) == ["only the January rows (mirror subset)"]
    assert data_status(task) == "prepared (partial)"
    # the full file obtained later (e.g. downloaded by hand) makes the partial build stale
    (raw_dir(task) / "full.csv").write_bytes(b"x")
    assert not is_prepared(task)


def test_failing_substitute_reports_both_problems(env: Path) -> None:
    bad = SUBSTITUTE.replace('"toy/series.csv"', '"toy/absent.csv"') + 'substitute_for = "full.csv"\n'
    task = substitute_task(env, bad)
    with pytest.raises(DataError) as err:
        prepare(task, progress=False)
    assert "full.csv" in str(err.value) and "partial substitute could not be fetched either" in str(err.value)
    assert not prepared_dir(task).exists()


def test_substitute_of_an_unknown_file_is_rejected(env: Path) -> None:
    with pytest.raises(TaskError, match="substitute_for names no"):
        substitute_task(env, SUBSTITUTE + 'substitute_for = "nope.zip"\n')


def test_manifest_folder_is_copied_verified_and_atomic(tmp_path: Path, mirror: Path) -> None:
    (mirror / "toy" / "imgs" / "a").mkdir(parents=True)
    (mirror / "toy" / "imgs" / "a" / "1.jpg").write_bytes(b"one")
    (mirror / "toy" / "imgs" / "2.png").write_bytes(b"two")
    lines = [f"{hashlib.sha256(b'one').hexdigest()}  a/1.jpg", f"{hashlib.sha256(b'two').hexdigest()}  2.png"]
    (mirror / "toy" / "MANIFEST.sha256").write_text("\n".join(lines) + "\n")
    digest = hashlib.sha256((mirror / "toy" / "MANIFEST.sha256").read_bytes()).hexdigest()
    source = DataSource("sample", "", "toy/imgs", manifest="toy/MANIFEST.sha256", manifest_sha256=digest)
    out = fetch_tree(source, tmp_path / "raw", mirror=mirror)
    assert (out / "a" / "1.jpg").read_bytes() == b"one" and (out / "2.png").read_bytes() == b"two"
    assert fetch_tree(source, tmp_path / "raw", mirror=mirror) == out  # complete: reused

    (mirror / "toy" / "imgs" / "2.png").write_bytes(b"tampered")
    with pytest.raises(DataError, match="does not verify"):
        fetch_tree(source, tmp_path / "raw2", mirror=mirror)
    assert names(tmp_path / "raw2") == [".sample.manifest"]  # no half-copied folder
    with pytest.raises(DataError, match="set BENCH_DATA_MIRROR"):
        fetch_tree(source, tmp_path / "raw3", mirror=None)


@pytest.mark.slow  # T6's data prepared four times: 30-90 s on 2 cores
def test_prepared_data_are_verified_against_their_build(generated_t6):
    """A changed, added or removed prepared file stops the next use with what to do; --force rebuilds."""
    import json

    from bench.tasks import data

    folder = data.prepare(generated_t6, progress=False)
    marker = json.loads((folder / ".complete").read_text())
    assert set(marker["files"]) == {"meta.json", "train.npy", "val.npy", "test.npy"}
    data.verify_prepared(generated_t6)  # as built: nothing to say
    original = (folder / "test.npy").read_bytes()
    for damage in (
        lambda: (folder / "test.npy").write_bytes(original[:-8] + b"\0" * 8),  # the labels of the last window
        lambda: (folder / "extra.npy").write_bytes(b"x"),
        lambda: (folder / "val.npy").unlink(),
    ):
        damage()
        with pytest.raises(data.DataError, match=r"changed since they were built .*bench data prepare t6 --force"):
            data.prepare(generated_t6, progress=False)
        data.prepare(generated_t6, force=True, progress=False)
        data.verify_prepared(generated_t6)
    assert (folder / "test.npy").read_bytes() == original and not (folder / "extra.npy").exists()
    del marker["files"]  # a cache built before content lists: rebuilt once, then verified
    (folder / ".complete").write_text(json.dumps(marker))
    assert not data.is_prepared(generated_t6)
    data.prepare(generated_t6, progress=False)
    assert "files" in json.loads((folder / ".complete").read_text())
