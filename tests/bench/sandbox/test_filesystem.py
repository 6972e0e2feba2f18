"""The sandbox's file-system view, attacked from inside a real bwrap sandbox.

Each test runs Python code in the sandbox an agent gets (bench.pipeline.launch's policy, on a fake harness
layout in tmp_path) that tries what a cheating agent would try, reports what happened, and the test checks
both the report and the host's files.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import uuid
from pathlib import Path

import pytest

from bench.paths import ROOT
from bench.sandbox import Policy, default_hidden, default_readable

pytestmark = pytest.mark.usefixtures("bwrap_ok")

# Inside: try to write each target (append, or create a file in a folder); report "ok" or the error's name.
WRITE_ATTEMPTS = r"""
import errno, json, os, sys
targets = json.loads(sys.argv[1]) if len(sys.argv) > 1 else json.loads(os.environ["TARGETS"])
out = {}
for name, path in targets.items():
    try:
        if os.path.isdir(path):
            path = os.path.join(path, "planted-by-agent.txt")
        with open(path, "a") as f:
            f.write("tampered")
        out[name] = "ok"
    except OSError as e:
        out[name] = errno.errorcode.get(e.errno, str(e.errno))
print(json.dumps(out))
"""


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_nothing_outside_the_workspace_can_be_written(harness, inside, policy_of, monkeypatch):
    tasks_file = ROOT / "tasks" / "t6_time_series_forecasting" / "prepare.py"
    venv_site = Path(next(p for p in sys.path if p.endswith("site-packages")))
    targets = {
        **{name: str(path) for name, path in harness.secrets.items()},
        "task_original": str(tasks_file),
        "tasks_dir": str(tasks_file.parent),
        "venv_site_packages": str(venv_site),
        "venv_python_module": str(Path(json.__file__)),
        "repo_bench": str(ROOT / "bench"),
        "etc": "/etc/hosts",
        "run_dir": str(harness.run_dir),
    }
    before = {name: digest(Path(p)) for name, p in targets.items() if Path(p).is_file()}
    monkeypatch.setenv("TARGETS", json.dumps(targets))
    seen = inside(policy_of(harness), WRITE_ATTEMPTS)
    assert set(seen) == set(targets)
    # /tmp is the sandbox's own scratch tmpfs: a write there lands in it, never in the host's file (checked below)
    assert [name for name, what in seen.items() if what == "ok"] == ["tmp"], seen
    # read-only where it is visible (the venv, the package's few files, /etc), missing where the allow-list does
    # not reach (the task originals in the repository, the harness's places)
    for name in ("venv_site_packages", "venv_python_module", "repo_bench", "etc"):
        assert seen[name] in ("EROFS", "EACCES"), (name, seen[name])
    for name in ("task_original", "tasks_dir", "prepared", "mirror", "home", "mlruns", "sibling", "own_result"):
        assert seen[name] in ("ENOENT", "EROFS"), (name, seen[name])
    assert seen["task_original"] == "ENOENT" and seen["own_log"] in ("ENOENT", "EROFS") and seen["run_dir"] == "EROFS"
    assert {name: digest(Path(p)) for name, p in targets.items() if Path(p).is_file()} == before
    assert not list(venv_site.glob("planted-by-agent.txt")) and not list(tasks_file.parent.glob("planted-*"))


def test_a_symlink_from_the_workspace_leads_nowhere(harness, inside, policy_of):
    """The agent links to its own run's result.json from the workspace and writes through the link."""
    code = (
        "import errno, json, os\n"
        f"os.symlink({str(harness.secrets['own_result'])!r}, 'link.json')\n"
        "try:\n    open('link.json', 'w').write('{}'); r = 'ok'\n"
        "except OSError as e:\n    r = errno.errorcode[e.errno]\n"
        "print(json.dumps({'write': r}))\n"
    )
    assert inside(policy_of(harness), code)["write"] in ("EROFS", "ENOENT")  # hidden: the file is not there
    assert harness.secrets["own_result"].read_text() == '{"score": 0.4}'


def test_the_harness_places_are_empty_inside(harness, inside, policy_of):
    places = {
        "cache": harness.cache,
        "mirror": harness.mirror,
        "home": harness.home,
        "mlruns": harness.mlruns,
        "run_dir": harness.run_dir,
        "sibling_run": harness.secrets["sibling"].parent,
        "tmp": harness.tmp,
    }
    code = (
        "import json, os\n"
        f"places = {json.dumps({k: str(v) for k, v in places.items()})}\n"
        f"secrets = {json.dumps({k: str(v) for k, v in harness.secrets.items()})}\n"
        "def ls(p):\n    try:\n        return sorted(os.listdir(p))\n"
        "    except OSError as e:\n        return type(e).__name__\n"
        "def read(p):\n    try:\n        return open(p).read()\n"
        "    except OSError as e:\n        return type(e).__name__\n"
        "seen = {'ls': {k: ls(p) for k, p in places.items()}, 'read': {k: read(p) for k, p in secrets.items()}}\n"
        "print(json.dumps(seen))\n"
    )
    seen = inside(policy_of(harness), code)
    assert set(seen["read"].values()) == {"FileNotFoundError"}, seen["read"]  # not one secret is readable
    ls = seen["ls"]
    assert ls["mirror"] == ls["home"] == ls["mlruns"] == [] and ls["sibling_run"] == "FileNotFoundError"
    assert ls["run_dir"] == ["home", "workspace"]  # its own workspace and private home, bound back; nothing else
    assert ls["cache"] == ["workspaces"]  # only the way down to its workspace
    assert set(ls["tmp"]) <= {"cache", "home", "mirror", "mlruns"}  # empty mount points, not the loose file


def test_the_workspace_is_writable_and_the_same_path_inside_and_out(harness, inside, policy_of):
    code = (
        "import json, os\n"
        "open('checkpoints.txt', 'w').write('from inside')\n"
        "open(os.path.join(os.environ['HOME'], '.clirc'), 'w').write('state')\n"
        "os.makedirs('checkpoints', exist_ok=True)\n"
        "print(json.dumps({'cwd': os.getcwd(), 'real': os.path.realpath('.'), 'train': open('train.py').read()}))\n"
    )
    env = {"PATH": "/usr/bin:/bin", "HOME": str(harness.private_home)}
    seen = inside(policy_of(harness), code, env=env)
    assert seen == {"cwd": str(harness.ws), "real": str(harness.ws.resolve()), "train": "print('hi')\n"}
    assert (harness.ws / "checkpoints.txt").read_text() == "from inside" and (harness.ws / "checkpoints").is_dir()
    assert (harness.private_home / ".clirc").read_text() == "state"


def test_tmp_is_private_and_scratch_and_the_cache_fails_loudly(harness, inside, policy_of):
    """/tmp is an empty writable tmpfs that vanishes with the sandbox; a hidden harness place is read-only."""
    code = (
        "import errno, json, os, tempfile\n"
        "with tempfile.NamedTemporaryFile('w', delete=False) as f:\n    f.write('x')\n"
        "try:\n"
        f"    open({str(harness.cache / 'new.txt')!r}, 'w'); cache = 'ok'\n"
        "except OSError as e:\n    cache = errno.errorcode[e.errno]\n"
        "print(json.dumps({'tmp_file': f.name, 'cache': cache}))\n"
    )
    seen = inside(policy_of(harness), code)
    assert seen["cache"] == "EROFS"
    assert Path(seen["tmp_file"]).parent == Path("/tmp") and not Path(seen["tmp_file"]).exists()
    assert not (harness.cache / "new.txt").exists()


def test_root_inside_cannot_unmount_the_view_or_change_the_kernel(harness, inside, policy_of):
    """bwrap run by root keeps every capability unless told; uid 0 may still write most of /proc/sys. Attack:
    unmount the tmpfs hiding the cache, remount / read-write, rewrite a machine-wide sysctl (with its own
    value, so that a failing defence changes nothing)."""
    code = (
        "import ctypes, errno, json, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        f"umount = libc.umount2({str(harness.cache).encode()!r}, 2)\n"
        "remount = libc.mount(b'none', b'/', None, 32 | 4096, None)\n"  # MS_REMOUNT | MS_BIND, read-write
        "value = open('/proc/sys/vm/swappiness').read()\n"
        "try:\n    open('/proc/sys/vm/swappiness', 'w').write(value); sysctl = 'ok'\n"
        "except OSError as e:\n    sysctl = errno.errorcode[e.errno]\n"
        "caps = [l.split()[1] for l in open('/proc/self/status') if l.startswith('CapEff')][0]\n"
        "print(json.dumps({'umount': umount, 'remount': remount, 'sysctl': sysctl, 'caps': caps}))\n"
    )
    seen = inside(policy_of(harness), code)
    assert seen == {"umount": -1, "remount": -1, "sysctl": "EROFS", "caps": "0000000000000000"}, seen


def test_a_predictor_sees_its_read_only_eval_folder_under_the_hidden_workspaces(harness, inside):
    """The official evaluation's predictor policy: an eval folder under the hidden workspaces root, read-only;
    nothing writable; the venv's packages importable (torch, as a real predictor would)."""
    eval_dir = harness.run_dir / "eval" / "best"
    (eval_dir).mkdir(parents=True)
    (eval_dir / "train.py").write_text("CONFIG = {}\n")
    code = (
        "import errno, json, os, torch\n"
        "try:\n    open('out.txt', 'w'); write = 'ok'\n"
        "except OSError as e:\n    write = errno.errorcode[e.errno]\n"
        "print(json.dumps({'cwd': os.getcwd(), 'files': sorted(os.listdir('.')), 'write': write,\n"
        "                  'run_dir': sorted(os.listdir('..')), 'torch': bool(torch.__version__)}))\n"
    )
    policy = Policy(cwd=eval_dir, writable=(), readable=(eval_dir,), hidden=default_hidden(), endpoints=())
    seen = inside(policy, code, timeout=180)
    assert seen == {"cwd": str(eval_dir), "files": ["train.py"], "write": "EROFS", "run_dir": ["best"], "torch": True}


@pytest.fixture
def dataset_copies():
    """Copies of a dataset where researchers keep them and no deny-list names them: /srv, /mnt, /opt, /var,
    another user's home, a top-level /data-like folder; removed afterwards."""
    tag = uuid.uuid4().hex[:10]
    folders = [
        Path(p) for p in (f"/srv/{tag}", f"/mnt/{tag}", f"/home/{tag}", f"/data-{tag}", f"/opt/{tag}", f"/var/{tag}")
    ]
    files, made = [], []
    for folder in folders:
        try:
            folder.mkdir(parents=True)
        except PermissionError:  # not root: the places this user can write are planted (none: skip)
            continue
        made.append(folder)
        files.append(folder / f"ETTh1-{tag}.csv")
        files[-1].write_text(
            "date,HUFL,HULL,MUFL,MULL,LUFL,LULL,OT\n2016-07-01 00:00:00,5.8,2.0,1.5,0.5,4.2,1.3,30.5\n"
        )
    if not files:
        pytest.skip("planting dataset copies in /srv, /mnt, /home, /opt, /var or / needs write access there (root)")
    try:
        yield tag, files
    finally:
        for folder in made:
            shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.parametrize("purpose", ["agent", "predictor"])
def test_find_from_the_root_finds_no_dataset_copy(purpose, dataset_copies, harness, inside, policy_of):
    """The agent's (and the predictor's) `find / -iname '*etth1*'`: the copies are not there, not even their
    folders; the root holds only what the allow-list binds."""
    tag, files = dataset_copies
    if purpose == "agent":
        policy = policy_of(harness)
    else:
        eval_dir = harness.run_dir / "eval" / "best"
        eval_dir.mkdir(parents=True)
        policy = Policy(
            cwd=eval_dir, writable=(), readable=(*default_readable("predictor"), eval_dir), hidden=default_hidden()
        )
    code = (
        "import json, os, subprocess\n"
        f"files = {json.dumps([str(f) for f in files])}\n"
        "found = subprocess.run(['find', '/', '-iname', '*etth1*', '-not', '-path', '/proc/*'],\n"
        "                       capture_output=True, text=True).stdout.split()\n"
        "def read(p):\n    try:\n        return open(p).read()\n"
        "    except OSError as e:\n        return type(e).__name__\n"
        "print(json.dumps({'found': found, 'read': [read(f) for f in files], 'root': sorted(os.listdir('/'))}))\n"
    )
    seen = inside(policy, code, env={"PATH": "/usr/bin:/bin"})
    assert seen["found"] == [] and set(seen["read"]) == {"FileNotFoundError"}, seen
    assert not any(tag in name for name in seen["root"])
    allowed = {"bin", "dev", "etc", "lib", "lib32", "lib64", "libx32", "proc", "sbin", "sys", "tmp", "usr", "var"}
    # plus the first folder of each path the run binds (the venv, the interpreter, the workspace): /work, /root
    bound_tops = {Path(p).parts[1] for p in (sys.prefix, sys.base_prefix, harness.ws)}
    assert set(seen["root"]) <= allowed | bound_tops, seen["root"]
    assert "home" not in seen["root"] and "srv" not in seen["root"] and "mnt" not in seen["root"]
