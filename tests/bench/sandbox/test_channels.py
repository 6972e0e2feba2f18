"""Channels between sandboxes (issue 29): locks on shared inodes, other processes' memory, the host's cgroup tree.

Every sandbox binds the same venv, ``/usr`` and ``/etc`` inodes, and a POSIX record lock (or an OFD lock, or a
``flock``) on one of them crosses every namespace: one run's predictor published T6's test inputs as locks on a
venv file and an agent sandbox of another run read them with ``F_GETLK``. Each test runs real sandboxes side by
side; where a test has a control (the same sandbox without the seccomp filter: the code before issue 29), the
control shows the channel open, so the test can fail.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import numpy
import pytest

from bench.sandbox import Policy, Sandbox, default_hidden, default_readable, probe
from bench.sandbox.resource_limits import Limits, RunGroup, cgroup_support
from bench.scoring.scorer import sandbox_wrap

pytestmark = pytest.mark.skipif(probe() is not None, reason=f"no usable sandbox here: {probe()}")

SHARED = Path(numpy.__file__)  # a venv file every sandbox reads (the attack used one like it)
START, LENGTH = 123_456_789, 4_242  # 64 bits a lock could carry: where it starts and how long it is

PUBLISH = f"""
import fcntl, json, os, struct, sys
fd = os.open({str(SHARED)!r}, os.O_RDONLY)
said = {{}}
for name, call in (
    ("posix", lambda: fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB, {LENGTH}, {START})),
    ("ofd", lambda: fcntl.fcntl(fd, 37, struct.pack("hhqqi4x", fcntl.F_RDLCK, 0, {START + 10**9}, {LENGTH}, 0))),
    ("flock", lambda: fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)),
):
    try:
        call()
        said[name] = "held"
    except OSError as e:
        said[name] = e.errno
print(json.dumps(said), flush=True)
sys.stdin.read()  # hold them until the test has looked
"""

READ = f"""
import errno, fcntl, json, os, struct
fd = os.open({str(SHARED)!r}, os.O_RDONLY)
seen = {{}}
for name, cmd, start in (("posix", fcntl.F_GETLK, {START}), ("ofd", 36, {START + 10**9})):
    try:
        got = fcntl.fcntl(fd, cmd, struct.pack("hhqqi4x", fcntl.F_WRLCK, 0, start, 1, 0))
        kind, _, at, length, _ = struct.unpack("hhqqi4x", got)
        seen[name] = None if kind == fcntl.F_UNLCK else [at, length]
    except OSError as e:
        seen[name] = e.errno
try:
    fcntl.flock(os.open({str(SHARED)!r}, os.O_RDONLY), fcntl.LOCK_EX | fcntl.LOCK_NB)
    seen["flock"] = None
except OSError as e:
    seen["flock"] = "held by another" if e.errno == errno.EWOULDBLOCK else e.errno
print(json.dumps(seen))
"""


def _agent_box(ws: Path, limits: Limits | None = None) -> Sandbox:
    policy = Policy(cwd=ws, writable=(ws,), readable=default_readable(), hidden=default_hidden())
    return Sandbox(policy, limits=RunGroup(limits or Limits()))


def _run(box: Sandbox, code: str, cwd: Path) -> dict:
    done = subprocess.run(box.wrap([sys.executable, "-c", code]), capture_output=True, text=True, cwd=cwd, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _published_and_read(predictor: Sandbox, eval_dir: Path, ws: Path) -> tuple[dict, dict]:
    """A predictor sandbox takes locks on a venv file and holds them while an agent sandbox looks at that file."""
    argv = predictor.wrap([sys.executable, "-c", PUBLISH])
    holder = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=eval_dir)
    try:
        published = json.loads(holder.stdout.readline())
        with _agent_box(ws) as agent:
            seen = _run(agent, READ, ws)
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    return published, seen


def test_a_predictor_can_neither_publish_nor_read_locks_on_a_file_an_agent_of_another_run_shares(tmp_path):
    eval_dir, ws = tmp_path / "eval", tmp_path / "ws"
    eval_dir.mkdir()
    ws.mkdir()
    predictor = sandbox_wrap(eval_dir)  # the scorer's own predictor sandbox
    try:
        published, seen = _published_and_read(predictor, eval_dir, ws)
        assert published == {"posix": 1, "ofd": 1, "flock": 1}, published  # EPERM, each
        assert seen == {"posix": None, "ofd": None, "flock": None}, seen  # nothing to see
        # the predictor cannot even test for a lock that an agent holds
        with _agent_box(ws) as agent:
            holder = subprocess.Popen(
                agent.wrap([sys.executable, "-c", PUBLISH]), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
            )
            try:
                assert json.loads(holder.stdout.readline()) == {"posix": "held", "ofd": "held", "flock": "held"}
                assert _run(predictor, READ, eval_dir) == {"posix": 1, "ofd": 1, "flock": 1}
            finally:
                holder.stdin.close()
                holder.wait(timeout=30)
    finally:
        predictor.close()
        predictor.limits.remove()

    # control: the same predictor sandbox without the filter (before issue 29) publishes 64 bits a lock
    unfiltered = Sandbox(replace(predictor.policy, seccomp=None))
    try:
        published, seen = _published_and_read(unfiltered, eval_dir, ws)
    finally:
        unfiltered.close()
    assert published == {"posix": "held", "ofd": "held", "flock": "held"}
    assert seen == {"posix": [START, LENGTH], "ofd": [START + 10**9, LENGTH], "flock": "held by another"}, seen


PTRACE = """
import ctypes, json, os
libc = ctypes.CDLL(None, use_errno=True)
out = {}
for name, pid in (("init", 1), ("launcher", os.getppid())):
    if libc.ptrace(16, pid, 0, 0) == 0:  # PTRACE_ATTACH
        os.waitpid(pid, 0x40000000)  # __WALL: its stop
        libc.ptrace(17, pid, 0, 0)  # PTRACE_DETACH
        out[name] = "attached"
    else:
        out[name] = ctypes.get_errno()
class IOV(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
buf = ctypes.create_string_buffer(8)
local, remote = IOV(ctypes.cast(buf, ctypes.c_void_p), 8), IOV(0x400000, 8)
libc.process_vm_readv.restype = ctypes.c_ssize_t
n = libc.process_vm_readv(os.getppid(), ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
out["process_vm_readv"] = "read" if n >= 0 else ctypes.get_errno()
print(json.dumps(out))
"""


def test_the_sandboxes_init_and_launcher_cannot_be_traced_or_read(tmp_path):
    for box in (_agent_box(tmp_path), sandbox_wrap(tmp_path)):
        with box:
            seen = _run(box, PTRACE, tmp_path)
        box.limits.remove()
        assert seen == {"init": 1, "launcher": 1, "process_vm_readv": 1}, (box.policy.seccomp, seen)
    with Sandbox(replace(_agent_box(tmp_path).policy, seccomp=None)) as open_box:  # control: no filter
        assert _run(open_box, PTRACE, tmp_path)["launcher"] == "attached"


CGROUP = """
import json, os
root = "/sys/fs/cgroup"
walk = os.walk(root) if os.path.isdir(root) else ()
tree = sorted(os.path.relpath(os.path.join(d, n), root) for d, ds, fs in walk for n in ds)
limit = None
for name in ("memory.max", "memory/memory.limit_in_bytes"):
    if os.path.isfile(os.path.join(root, name)):
        limit = int(open(os.path.join(root, name)).read())
own = open("/proc/self/cgroup").read()
print(json.dumps({"exists": os.path.isdir(root), "groups": tree, "limit": limit, "own": own}))
"""


@pytest.mark.skipif(cgroup_support() is None, reason="no cgroup can be made here")
def test_an_agent_sees_only_its_runs_own_cgroup_and_a_predictor_none(tmp_path):
    box = _agent_box(tmp_path, Limits(memory_bytes=3 << 30))
    try:
        with box:
            seen = _run(box, CGROUP, tmp_path)
    finally:
        box.limits.remove()
    support = cgroup_support()
    assert seen["exists"] and seen["limit"] == 3 << 30, seen  # its own limit, where a runtime reads it
    # the run's own group(s) and nothing of the host's tree: no sibling group, no parent
    expected_top = [] if support.version == 2 else ["memory", "pids"]
    assert [g for g in seen["groups"] if "/" not in g] == expected_top, seen["groups"]
    assert not any("bench-" in g or "process_api" in g for g in seen["groups"]), seen["groups"]
    assert all(line.endswith(":/") for line in seen["own"].splitlines()), seen["own"]  # a cgroup namespace

    predictor = sandbox_wrap(tmp_path)
    try:
        assert _run(predictor, CGROUP, tmp_path)["exists"] is False
    finally:
        predictor.close()
        predictor.limits.remove()


TOOLS = """
set -e
cd "$1"
python3 - <<'EOF'
import sqlite3, threading
def write(i):
    db = sqlite3.connect("store.db", timeout=30)
    db.execute("create table if not exists t (i)")
    for _ in range(50):
        with db:
            db.execute("insert into t values (?)", (i,))
threads = [threading.Thread(target=write, args=(i,)) for i in range(4)]
[t.start() for t in threads]
[t.join() for t in threads]
print("sqlite", sqlite3.connect("store.db").execute("select count(*) from t").fetchone()[0])
EOF
git init -q repo && cd repo && echo a > a && git add a
git -c user.email=a@b -c user.name=a commit -qm one && echo git ok
cd .. && node -e 'const fs=require("fs"); const w=fs.watch("."); w.close(); console.log("node ok")'
"""


def test_the_agents_tools_that_lock_still_work_under_the_agent_filter(tmp_path):
    """SQLite (the optuna agent's storage) takes and tests POSIX locks, git uses lock files, node watches files: the
    agent filter leaves locks and watches alone (no predictor can take or test one, so they carry nothing)."""
    if not (shutil.which("git") and shutil.which("node")):
        pytest.skip("git and node are not installed here")
    box = _agent_box(tmp_path)
    try:
        with box:
            code = textwrap.dedent(TOOLS)
            done = subprocess.run(
                box.wrap(["/bin/sh", "-c", code, "sh", str(tmp_path)]), capture_output=True, text=True, timeout=120
            )
    finally:
        box.limits.remove()
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["sqlite", "200", "git", "ok", "node", "ok"], done.stdout


KEYS = """
import ctypes, json, os, sys
libc = ctypes.CDLL(None, use_errno=True)
name, value = sys.argv[1].encode(), sys.argv[2].encode()
said = {}
if value:
    r = libc.syscall(SYS_ADD_KEY, b"user", name, value, len(value), -4)  # into the user keyring (uid 0's)
    said["add_key"] = "added" if r > 0 else ctypes.get_errno()
r = libc.syscall(SYS_REQUEST_KEY, b"user", name, None, 0)
buf = ctypes.create_string_buffer(64)
if r > 0:
    n = libc.syscall(SYS_KEYCTL, 11, r, buf, 64)  # KEYCTL_READ
    said["read"] = buf.raw[:n].decode()
else:
    said["read"] = ctypes.get_errno()
print(json.dumps(said))
"""
KEY_CALLS = {"x86_64": (248, 249, 250), "aarch64": (217, 218, 219)}


def _keys(box: Sandbox, cwd: Path, name: str, value: str) -> dict:
    import platform

    add, request, keyctl = KEY_CALLS[platform.machine()]
    code = KEYS.replace("SYS_ADD_KEY", str(add)).replace("SYS_REQUEST_KEY", str(request))
    code = code.replace("SYS_KEYCTL", str(keyctl))
    done = subprocess.run(box.wrap([sys.executable, "-c", code, name, value]), capture_output=True, text=True, cwd=cwd)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _forget(name: str) -> None:
    """Unlink a key a control left in this user's keyring."""
    import ctypes
    import platform

    add, request, keyctl = KEY_CALLS[platform.machine()]
    libc = ctypes.CDLL(None, use_errno=True)
    key = libc.syscall(request, b"user", name.encode(), None, 0)
    if key > 0:
        libc.syscall(keyctl, 9, key, -4)  # KEYCTL_UNLINK from the user keyring


def test_no_sandbox_can_leave_a_key_in_the_users_keyring_for_another(tmp_path):
    """The user keyring belongs to the uid, and every sandbox runs as the same uid: without the filter a key one
    sandbox adds is read by any other (the control, as root; a non-root user's sandboxes each get a user namespace
    of their own, with keyrings of their own, so there the channel is closed twice)."""
    import uuid

    name = f"bench-test-{uuid.uuid4().hex[:8]}"
    predictor = sandbox_wrap(tmp_path)
    try:
        assert _keys(predictor, tmp_path, name, "T6 row 0.1234") == {"add_key": 1, "read": 1}  # EPERM
        with _agent_box(tmp_path) as agent:
            assert _keys(agent, tmp_path, name, "") == {"read": 1}
        unfiltered = Sandbox(replace(predictor.policy, seccomp=None))
        try:
            assert _keys(unfiltered, tmp_path, name, "T6 row 0.1234") == {"add_key": "added", "read": "T6 row 0.1234"}
            with Sandbox(replace(_agent_box(tmp_path).policy, seccomp=None)) as open_agent:
                control = _keys(open_agent, tmp_path, name, "")
            if os.geteuid() == 0:
                assert control == {"read": "T6 row 0.1234"}  # the channel, open
            else:  # a non-root user's sandbox is a user namespace of its own, whose keyrings are its own
                assert control == {"read": errno.ENOKEY}
        finally:
            unfiltered.close()
    finally:
        _forget(name)
        predictor.close()
        predictor.limits.remove()
