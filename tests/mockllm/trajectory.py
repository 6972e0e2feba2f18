"""The scripted agent: which step comes next, and how to say it with the tools a CLI offers.

A real model decides from the conversation; so does the mock, in the simplest way that survives
retries and side requests: the next step is the number of tool results already in the request.
A step is abstract (read a file, write a file, run a command, answer); :func:`tool_call` turns
it into one concrete call of the CLI's own tool, found by name in the request's tool list and
filled in after that tool's argument schema, so that one trajectory plays every CLI.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Step:
    kind: str  # "read", "write", "shell" or "answer"
    path: str = ""
    content: str = ""
    command: str = ""
    text: str = ""


def read(path: str) -> Step:
    return Step("read", path=path)


def write(path: str, content: str) -> Step:
    return Step("write", path=path, content=content)


def shell(command: str) -> Step:
    return Step("shell", command=command)


def answer(text: str) -> Step:
    return Step("answer", text=text)


def run1_from_train(train_py: str, epochs: int = 1) -> str:
    """A run_1.py derived from the task's train.py with a smaller config (fewer epochs), as an agent would."""
    small, n = re.subn(r'("epochs":\s*)\d+', rf"\g<1>{epochs}", train_py)
    return small if n else train_py


def default_trajectory(run1: str, command: str = "python run_1.py") -> list[Step]:
    """Read program.md, write run_1.py, run it, finish with a text answer."""
    return [
        read("program.md"),
        write("run_1.py", run1),
        shell(command),
        answer("Done: run_1.py trained and saved scored checkpoints into checkpoints/."),
    ]


def next_step(trajectory: list[Step], done: int) -> Step:
    """The step after ``done`` tool results; past the end, the final answer (again)."""
    actions = [s for s in trajectory if s.kind != "answer"]
    if done < len(actions):
        return actions[done]
    final = [s for s in trajectory if s.kind == "answer"]
    return final[-1] if final else answer("Done.")


# --- from abstract step to the CLI's own tool -------------------------------------------------------------

READ_TOOLS = ("Read", "read", "read_file")
WRITE_TOOLS = ("Write", "write", "write_file")
PATCH_TOOLS = ("apply_patch",)
SHELL_TOOLS = ("Bash", "bash", "run_shell_command", "exec_command", "shell_command", "shell")
PATH_KEYS = ("file_path", "filePath", "absolute_path", "path")


@dataclass(frozen=True)
class Tool:
    """A tool offered by the CLI: its name, its JSON schema (None for a freeform tool)."""

    name: str
    schema: dict | None


@dataclass(frozen=True)
class Call:
    """One tool call as the model sends it: JSON arguments, or the raw input of a freeform tool."""

    name: str
    args: dict | None = None
    raw: str | None = None

    @property
    def arguments(self) -> str:
        return self.raw if self.raw is not None else json.dumps(self.args)


def _props(tool: Tool) -> dict:
    return (tool.schema or {}).get("properties") or {}


def _find(tools: dict[str, Tool], names: tuple[str, ...]) -> Tool | None:
    return next((tools[n] for n in names if n in tools), None)


def _abs(path: str, cwd: str | None) -> str:
    return path if path.startswith("/") or not cwd else f"{cwd.rstrip('/')}/{path}"


def _fill_required(tool: Tool, args: dict) -> dict:
    """Required arguments the step does not know get a harmless value of their type."""
    for key in (tool.schema or {}).get("required") or []:
        if key not in args:
            kind = _props(tool).get(key, {}).get("type")
            args[key] = {"boolean": False, "number": 0, "integer": 0, "array": []}.get(kind, "mock")
    return args


def _shell_call(tool: Tool, command: str) -> Call:
    props = _props(tool)
    if "cmd" in props:  # Codex exec_command: no login shell, so that the harness's PATH (its python) holds
        args = {"cmd": command}
        if "login" in props:
            args["login"] = False
        if "yield_time_ms" in props:
            args["yield_time_ms"] = 30000
    elif props.get("command", {}).get("type") == "array":  # Codex's older `shell` tool: argv
        args = {"command": ["bash", "-c", command]}
    else:
        args = {"command": command}
    if "description" in props:
        args["description"] = "Run the command"
    if "timeout" in props and tool.name == "Bash":
        args["timeout"] = 600000
    return Call(tool.name, _fill_required(tool, args))


def _patch(path: str, content: str) -> str:
    lines = "".join(f"+{line}\n" for line in content.splitlines())
    return f"*** Begin Patch\n*** Add File: {path}\n{lines}*** End Patch\n"


def heredoc(path: str, content: str) -> str:
    return f"cat > {path} <<'MOCK_EOF'\n{content.rstrip(chr(10))}\nMOCK_EOF"


def tool_call(step: Step, tools: dict[str, Tool], cwd: str | None) -> Call | None:
    """The concrete call for a step, or None when the CLI offers no tool for it (then: answer in text)."""
    sh = _find(tools, SHELL_TOOLS)
    if step.kind == "read":
        tool = _find(tools, READ_TOOLS)
        key = next((k for k in PATH_KEYS if tool and k in _props(tool)), None)
        if tool and key:
            return Call(tool.name, _fill_required(tool, {key: _abs(step.path, cwd)}))
        return _shell_call(sh, f"cat {step.path}") if sh else None
    if step.kind == "write":
        tool = _find(tools, WRITE_TOOLS)
        key = next((k for k in PATH_KEYS if tool and k in _props(tool)), None)
        if tool and key:
            return Call(tool.name, _fill_required(tool, {key: _abs(step.path, cwd), "content": step.content}))
        patch = _find(tools, PATCH_TOOLS)
        if patch and patch.schema is None:  # Codex: a freeform (grammar) tool, the patch is the whole input
            return Call(patch.name, raw=_patch(step.path, step.content))
        if patch:
            key = next(iter(_props(patch)), "input")
            return Call(patch.name, {key: _patch(step.path, step.content)})
        return _shell_call(sh, heredoc(step.path, step.content)) if sh else None
    if step.kind == "shell":
        return _shell_call(sh, step.command) if sh else None
    return None


CWD_PATTERNS = (
    r"<cwd>([^<\n]+)</cwd>",  # Codex environment_context
    r"Primary working directory: (/[^\s\"'`]+)",  # Claude Code
    r"Working directory: (/[^\s\"'`]+)",  # OpenCode
    r"Workspace Directories:\*\*\s*-\s*(/[^\s\"'`]+)",  # Gemini CLI session context
    r"working in the directory:? (/[^\s\"'`]+)",
)


def find_cwd(text: str) -> str | None:
    """The agent's working directory, as the CLI tells its model in the system prompt or context."""
    for pattern in CWD_PATTERNS:
        m = re.search(pattern, text)
        if m:
            return m.group(1).rstrip(".,")
    return None
