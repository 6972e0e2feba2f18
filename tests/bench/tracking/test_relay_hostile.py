"""The spool and tail files as hostile input (issue 29): the relay reads them through :mod:`bench.untrusted`.

Before: a FIFO named like a spool file blocked the relay forever in ``open()``; a directory with that name raised
IsADirectoryError and a line of 100,000 ``[`` a RecursionError out of ``finalize`` (the run was never recorded); a
tail file that was a link to a host file was uploaded as ``stdout_tail.txt``. Each case runs in a thread with a
deadline, so a regression fails here instead of hanging the suite.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from pathlib import Path

from bench.tracking import schema
from bench.tracking.relay import Relay
from bench.tracking.writer import MlflowWriter
from tests.lazy import lazy

mlflow = lazy("mlflow")  # imported at its first use (tests/lazy.py)

T = 1_700_000_000.0
START = {"ev": "start", "t": T, "script": "run_1.py", "pid": 4242, "argv": ["run_1.py"], "source": ""}
END = {"ev": "end", "t": T + 30, "status": "FINISHED"}


def _relay(tmp_path: Path) -> tuple[Relay, Path]:
    spool = tmp_path / "ws" / ".bench" / "spool"
    spool.mkdir(parents=True)
    writer = MlflowWriter(f"test-hostile-{uuid.uuid4().hex[:8]}")
    parent = writer.create_run("agent", {schema.KIND: schema.KIND_AGENT})
    return Relay(writer, parent, spool, {}, state_file=tmp_path / "relay.json"), spool


def _write(spool: Path, name: str, lines: list) -> None:
    (spool / name).write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))


def _finalize(relay: Relay, deadline_s: float = 30) -> dict:
    """relay.finalize() in a thread: the summary, or a failure naming the hang (a blocked open() never returns)."""
    out: dict = {}

    def go() -> None:
        try:
            out["summary"] = relay.finalize()
        except BaseException as e:  # the test reports what escaped
            out["error"] = e

    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    thread.join(deadline_s)
    assert not thread.is_alive(), f"the relay hung for {deadline_s} s on the spool"
    assert "error" not in out, f"the relay raised {out.get('error')!r}"
    return out["summary"]


def _open_runs(summary: dict) -> list[str]:
    client = mlflow.tracking.MlflowClient()
    return [s["run_id"] for s in summary["scripts"] if client.get_run(s["run_id"]).info.status == "RUNNING"]


def test_a_fifo_a_directory_a_socket_and_links_in_the_spool_are_refused_by_name_and_the_rest_is_relayed(tmp_path):
    relay, spool = _relay(tmp_path)
    _write(spool, "1-1.jsonl", [START, {"ev": "metrics", "t": T, "step": 1, "metrics": {"loss": 0.5}}, END])
    os.mkfifo(spool / "2-2.jsonl")  # open() of it waits for a writer: forever
    (spool / "3-3.jsonl").mkdir()
    secret = tmp_path / "host-secret.txt"
    secret.write_text(json.dumps({**START, "script": "SECRET-host-file"}) + "\n")
    (spool / "4-4.jsonl").symlink_to(secret)
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(spool / "5-5.jsonl"))
        summary = _finalize(relay)
    refused = summary["relay"]["refused_files"]
    assert refused["counts"] == {"link": 1, "not-regular": 3}, refused
    named = {Path(e["path"]).name: e["what"] for e in refused["examples"]}
    assert named == {"2-2.jsonl": "not-regular", "3-3.jsonl": "not-regular", "4-4.jsonl": "link",
                     "5-5.jsonl": "not-regular"}  # fmt: skip
    (script,) = summary["scripts"]
    assert script["script"] == "run_1.py" and script["status"] == "FINISHED" and script["values"] == 1
    assert "SECRET-host-file" not in json.dumps(summary)  # the link's target was never read
    assert _open_runs(summary) == []


def test_a_parser_bomb_an_over_long_line_and_garbage_are_dropped_and_counted_and_the_script_goes_on(tmp_path):
    relay, spool = _relay(tmp_path)
    bomb = "[" * 100_000
    deep_but_short = "{" * 70 + "}" * 70  # valid JSON nested past the bound: dropped, not parsed
    lines = [START, bomb, deep_but_short, "not json at all", {"ev": "metrics", "t": T, "step": 2, "metrics": {"a": 1}}]
    _write(spool, "1-1.jsonl", [*lines, END])
    summary = _finalize(relay)
    (script,) = summary["scripts"]
    assert script["status"] == "FINISHED" and script["values"] == 1  # the event after the bomb was relayed
    assert summary["relay"]["lines_dropped"] == {"bad-json": 1, "too-deep": 2}
    assert script["lines_dropped"] == {"bad-json": 1, "too-deep": 2}


def test_a_line_longer_than_a_whole_read_is_passed_over_with_a_count(tmp_path, monkeypatch):
    from bench.tracking import relay as relay_module

    monkeypatch.setattr(relay_module, "MAX_READ", 4096)
    relay, spool = _relay(tmp_path)
    _write(spool, "1-1.jsonl", [START, "x" * 10_000, {"ev": "metrics", "t": T, "step": 2, "metrics": {"a": 1}}, END])
    summary = _finalize(relay)
    (script,) = summary["scripts"]
    assert script["status"] == "FINISHED" and script["values"] == 1
    assert summary["relay"]["lines_dropped"] == {"too-long": 1}


def test_a_tail_that_is_a_fifo_a_link_or_sparse_is_refused_and_never_uploaded(tmp_path):
    relay, spool = _relay(tmp_path)
    for n in (1, 2, 3, 4):
        _write(spool, f"{n}-{n}.jsonl", [{**START, "script": f"s{n}.py"}, END])
    os.mkfifo(spool / "1-1.jsonl.tail")
    secret = tmp_path / "shadow"
    secret.write_text("root:SECRET-shadow-hash:19000::::::\n")
    (spool / "2-2.jsonl.tail").symlink_to(secret)
    with open(spool / "3-3.jsonl.tail", "wb") as f:  # 1 GiB apparent, nothing allocated
        f.truncate(1 << 30)
    (spool / "4-4.jsonl.tail").write_text("step 1 | loss 0.5\n" * 10)
    summary = _finalize(relay)
    tails = summary["relay"]["refused_files"]
    named = {Path(e["path"]).name: e["what"] for e in tails["examples"]}
    assert named == {"1-1.jsonl.tail": "not-regular", "2-2.jsonl.tail": "link", "3-3.jsonl.tail": "sparse"}
    client = mlflow.tracking.MlflowClient()
    uploaded = {}
    for s in summary["scripts"]:
        names = [a.path for a in client.list_artifacts(s["run_id"])]
        uploaded[s["script"]] = "stdout_tail.txt" in names
    assert uploaded == {"s1.py": False, "s2.py": False, "s3.py": False, "s4.py": True}
    (s4,) = [s for s in summary["scripts"] if s["script"] == "s4.py"]
    text = Path(client.download_artifacts(s4["run_id"], "stdout_tail.txt", str(tmp_path))).read_text()
    assert text == "step 1 | loss 0.5\n" * 10


def test_a_fifo_in_the_spool_does_not_block_the_live_relay(tmp_path):
    """The live loop polls every interval: a FIFO there must not stop it (nor the scripts after it)."""
    relay, spool = _relay(tmp_path)
    os.mkfifo(spool / "0-0.jsonl")
    _write(spool, "1-1.jsonl", [START])
    started = time.monotonic()
    done = threading.Event()
    threading.Thread(target=lambda: (relay.poll(), done.set()), daemon=True).start()
    assert done.wait(30), "poll() blocked on the FIFO"
    assert time.monotonic() - started < 30
    assert relay.launches == 1
    _finalize(relay)


def test_forged_events_naming_hard_links_of_one_file_or_a_sparse_file_upload_it_once_or_not_at_all(tmp_path):
    """Hard links of one file named by forged checkpoint events went to the store once per name (800 MB from 1.3 MB
    on disk); a sparse file went whole. Now one upload per file, and a sparse file none."""
    relay, spool = _relay(tmp_path)
    ckpts = spool.parents[1] / "checkpoints"
    ckpts.mkdir()
    (ckpts / "real.pt").write_bytes(os.urandom(64 << 10))
    for n in range(5):
        os.link(ckpts / "real.pt", ckpts / f"link{n}.pt")
    with open(ckpts / "sparse.pt", "wb") as f:
        f.truncate(1 << 30)
    names = ["real.pt", *(f"link{n}.pt" for n in range(5)), "sparse.pt"]
    events = [{"ev": "checkpoint", "t": T, "path": str(ckpts / n), "val_score": 0.1, "metric": "mse"} for n in names]
    _write(spool, "1-1.jsonl", [START, *events, END])
    summary = _finalize(relay)
    relayed = summary["relay"]["checkpoints"]
    assert relayed["uploaded"] == 1 and relayed["not_uploaded"] == {"same-file": 5, "sparse": 1}
    (script,) = summary["scripts"]
    client = mlflow.tracking.MlflowClient()
    assert [a.path for a in client.list_artifacts(script["run_id"], "checkpoints")] == ["checkpoints/real.pt"]
    assert not list(tmp_path.glob(".bench-staged-*"))  # the staged copies are gone


def test_a_flood_of_spool_files_is_cut_at_the_cap_with_a_finding(tmp_path, monkeypatch):
    from bench.tracking import spool_files

    monkeypatch.setattr(spool_files, "MAX_SPOOL_FILES", 50)
    relay, spool = _relay(tmp_path)
    for n in range(60):
        _write(spool, f"{n:03d}-{n}.jsonl", [{**START, "script": f"s{n}.py"}, END])
    summary = _finalize(relay)
    assert summary["launched"] == 50 and len(relay.scripts) == 50  # relay.json holds no more than the cap
    assert summary["relay"]["refused_files"]["counts"] == {"too-many": 1}
    assert _open_runs(summary) == []


def test_a_script_error_with_newlines_is_one_plain_line_in_the_reason_tag(tmp_path):
    relay, spool = _relay(tmp_path)
    error = "ValueError: x\n# Heading\n\n| a | b |\n\x1b[31mred\x1b[0m"
    _write(spool, "1-1.jsonl", [START, {"ev": "end", "t": T + 1, "status": "FAILED", "error": error}])
    (script,) = _finalize(relay)["scripts"]
    reason = mlflow.tracking.MlflowClient().get_run(script["run_id"]).data.tags[schema.REASON]
    assert reason == "ValueError: x # Heading | a | b | red", repr(reason)
