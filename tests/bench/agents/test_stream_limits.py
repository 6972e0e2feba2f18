"""The agent's output in bounded memory (bench.agents.stream): lines cut at the line limit, agent.log capped with its
head and tail kept and the cut noted, events.jsonl capped."""

from __future__ import annotations

import subprocess
import sys

from bench.agents.stream import AgentStream, CappedLog
from bench.progress import StatusLine
from bench.sandbox.resource_limits import KIB, MIB, Limits


def test_the_log_keeps_its_head_and_its_newest_tail_and_says_how_much_it_cut(tmp_path):
    log = CappedLog(tmp_path / "agent.log", 400)  # head 200 bytes, tail segments of 100
    data = bytes(i % 251 for i in range(1000))
    for i in range(0, 1000, 100):
        log.write(data[i : i + 100])
    assert log.close() == 600  # 1000 written: the head's 200 and the newest 200 kept
    text = (tmp_path / "agent.log").read_bytes()
    note = b"\n[bench] agent.log cut here: 600 bytes left out (log limit)\n"
    assert text == data[:200] + note + data[800:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["agent.log"]  # the segments are gone


def test_a_log_under_its_cap_is_kept_whole(tmp_path):
    log = CappedLog(tmp_path / "agent.log", 400)
    log.write(b"a" * 150)
    log.write(b"b" * 100)  # past the head: into a segment, appended at the close
    assert log.close() == 0
    assert (tmp_path / "agent.log").read_bytes() == b"a" * 150 + b"b" * 50 + b"b" * 50


def _stream(tmp_path, code: str, limits: Limits, parser: str | None = None) -> AgentStream:
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    status = StatusLine("t", enabled=False)
    stream = AgentStream(proc, tmp_path / "agent.log", tmp_path / "events.jsonl", status, False, parser, None, limits)
    stream.start()
    proc.wait()
    stream.join(timeout=60)
    return stream


def test_a_line_longer_than_the_limit_is_cut_and_the_next_lines_are_read(tmp_path):
    code = "import sys; sys.stdout.write('a' * 5_000_000); print(); print('after')"
    stream = _stream(tmp_path, code, Limits(log_bytes=1 * MIB))  # lines of at most 512 KiB
    text = (tmp_path / "agent.log").read_text()
    assert text.startswith("a" * (512 * KIB) + "\n[bench] line cut at 524288 bytes: 4475712 more bytes left out\n")
    assert text.endswith("after\n")
    assert stream.limits_hit() == [
        {"limit": "line", "value": 512 * KIB, "lines": 1, "dropped_bytes": 5_000_000 - 512 * KIB}
    ]


def test_events_stop_growing_at_the_limit_but_are_still_counted(tmp_path):
    line = '{"type":"assistant","message":{"content":[{"type":"text","text":"%s"}]}}'
    code = f"for i in range(400): print('{line}' % ('x' * 300))"
    stream = _stream(tmp_path, code, Limits(log_bytes=64 * KIB), parser="claude-code")
    size = (tmp_path / "events.jsonl").stat().st_size
    assert 0 < size <= 64 * KIB
    written = len((tmp_path / "events.jsonl").read_text().splitlines())
    hit = {h["limit"]: h for h in stream.limits_hit()}
    assert written + hit["events"]["dropped_events"] >= 400  # every message parsed: kept or counted
    assert hit["log"]["dropped_bytes"] > 0  # 400 lines of ~380 bytes: past the 64 KiB log too
