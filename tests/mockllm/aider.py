"""Aider's side of the mock: no tools, edits as SEARCH/REPLACE blocks in the text, commands in ```bash.

Aider sends one Chat Completions request per ``--message`` (plus reflections when an edit fails).
It applies every edit block of the answer and offers to run every ```bash block, so the whole
trajectory (write the files, run the commands) goes into the first answer; the files to read
are given to Aider on its command line instead of a read tool. Later requests get the final text.
"""

from __future__ import annotations

from tests.mockllm.trajectory import Step, next_step

MARK = "Plan (mock):"
FENCE = "`" * 3


def is_aider(body: dict) -> bool:
    system = " ".join(str(m.get("content")) for m in body.get("messages") or [] if m.get("role") == "system")
    return "SEARCH/REPLACE" in system


def turns_done(body: dict) -> int:
    return sum(
        1 for m in body.get("messages") or [] if m.get("role") == "assistant" and MARK in str(m.get("content") or "")
    )


def edit_block(path: str, content: str) -> str:
    """A diff-format block that creates ``path`` (empty SEARCH section)."""
    body = content if content.endswith("\n") else content + "\n"
    return f"{path}\n{FENCE}python\n<<<<<<< SEARCH\n=======\n{body}>>>>>>> REPLACE\n{FENCE}\n"


def reply(trajectory: list[Step], done: int) -> str:
    if done > 0:
        return next_step(trajectory, 10**6).text or "Done."
    parts = [f"{MARK} write the training script, then run it."]
    for step in trajectory:
        if step.kind == "write":
            parts.append(edit_block(step.path, step.content))
        elif step.kind == "shell":
            parts.append(f"Run it with:\n\n{FENCE}bash\n{step.command}\n{FENCE}\n")
    return "\n".join(parts)
