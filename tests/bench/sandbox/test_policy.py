"""The allow-list view and the bwrap arguments it becomes (no sandbox is started here, but in the last test):
the order of the mounts, the system part and the GPU part on simulated layouts (a fake machine root in
tmp_path, with device nodes made by mknod where allowed), the package's own files, the masked sockets."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import pytest

from bench.paths import ROOT, cache_dir, mlruns_dir
from bench.sandbox import Policy, bwrap_args, default_hidden, default_readable
from bench.sandbox.policy import plan
from bench.sandbox.view import gpu_binds, package_binds, system_binds


def ops(args: list[str]) -> list[tuple[str, str]]:
    """(option, path) for the mount options, in order."""
    out, i = [], 0
    while i < len(args):
        if args[i] in ("--tmpfs", "--remount-ro", "--chdir", "--dev", "--proc"):
            out.append((args[i], args[i + 1]))
            i += 2
        elif args[i] in ("--bind", "--ro-bind", "--dev-bind", "--ro-bind-try", "--symlink"):
            out.append((args[i], args[i + 2]))
            i += 3
        else:
            i += 1
    return out


def touch(path: Path, mode: int = 0o644, text: str = "") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
    return path


def test_parents_first_nothing_unlisted_and_read_only_tmpfs_after_the_binds(tmp_path):
    home, tmp = tmp_path / "home", tmp_path / "scratch"
    repo, mlruns = home / "repo", home / "repo" / "mlruns"
    cache, clis, prepared = home / ".cache" / "x", home / ".cache" / "x" / "clis", home / ".cache" / "x" / "prepared"
    ws = tmp / "run" / "workspace"
    for d in (mlruns, clis, prepared, ws, home / "run" / "home"):
        d.mkdir(parents=True)
    policy = Policy(
        cwd=ws,
        writable=(ws, home / "run" / "home", tmp_path / "missing"),
        readable=(repo, clis, repo / "bench"),
        hidden=(home, cache, mlruns, prepared, tmp_path / "absent"),
        scratch=(tmp,),
        gpu=False,
        system=False,
    )
    got = ops(bwrap_args(policy))
    mounts = [(o, p) for o, p in got if o not in ("--ro-bind-try", "--dev", "--proc")]
    assert mounts == [
        # no --ro-bind / /: the root is an empty tmpfs; the hidden home and cache under nothing bound need no mount
        ("--tmpfs", str(tmp)),  # scratch: stays writable (no --remount-ro)
        ("--ro-bind", str(repo)),  # (repo/bench: already readable through it, no mount)
        ("--tmpfs", str(mlruns)),  # hidden inside the readable repo
        ("--bind", str(home / "run" / "home")),
        ("--bind", str(ws)),
        ("--ro-bind", str(clis)),  # readable; the cache and prepared beside it are simply absent
        ("--remount-ro", str(mlruns)),
        ("--remount-ro", "/"),  # the root tmpfs itself: nothing can be created beside the binds
        ("--chdir", str(ws)),
    ]
    assert got[:2] == [("--dev", "/dev"), ("--proc", "/proc")] and ("--ro-bind-try", "/proc/sys") in got
    args = bwrap_args(policy)
    assert args[args.index("--cap-drop") + 1] == "ALL"
    for flag in ("--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--die-with-parent"):
        assert flag in args
    assert "--new-session" not in args  # the watchdog signals the agent's process group


def test_the_system_part_on_a_simulated_machine(tmp_path):
    """merged /usr links stay links, a real /lib64 is bound, /usr/local keeps only its program folders, /etc is
    bound with every secret masked, /sys only its read parts; /home, /srv, /mnt, /data, /opt are not listed."""
    r = tmp_path
    for d in ("usr/bin", "usr/lib", "usr/sbin", "lib64", "usr/local/bin", "usr/local/lib", "usr/local/share/data"):
        (r / d).mkdir(parents=True)
    for d in ("home/alice", "srv/x", "mnt/y", "data/etth1", "opt/tool", "root", "var/lib", "sys/devices/system/cpu"):
        (r / d).mkdir(parents=True)
    (r / "sys" / "firmware").mkdir()
    (r / "bin").symlink_to("usr/bin")
    (r / "sbin").symlink_to("usr/sbin")
    (r / "lib").symlink_to("usr/lib")
    etc = r / "etc"
    touch(etc / "passwd")
    touch(etc / "hosts")
    touch(etc / "shadow", 0o640)
    touch(etc / "sudoers", 0o444)  # by name, even when others may read it
    touch(etc / "ssh" / "ssh_host_ed25519_key", 0o600)
    touch(etc / "ssh" / "ssh_host_rsa_key", 0o644)  # by name
    touch(etc / "ssh" / "ssh_host_ed25519_key.pub")
    touch(etc / "ssl" / "certs" / "ca.pem")
    touch(etc / "ssl" / "private" / "server.key", 0o600)
    (etc / "ssl" / "private").chmod(0o700)
    touch(etc / "app" / "db.conf", 0o640)
    (etc / "localtime").symlink_to("/usr/share/zoneinfo/UTC")
    got = {(str(b.path.relative_to(r)), b.mode, b.target) for b in system_binds(r)}
    assert got == {
        ("usr", "ro", ""),
        ("bin", "link", "usr/bin"),
        ("sbin", "link", "usr/sbin"),
        ("lib", "link", "usr/lib"),
        ("lib64", "ro", ""),
        ("usr/local", "empty", ""),
        ("usr/local/bin", "ro", ""),
        ("usr/local/lib", "ro", ""),
        ("etc", "ro", ""),
        ("etc/shadow", "mask", ""),
        ("etc/sudoers", "mask", ""),
        ("etc/ssh/ssh_host_ed25519_key", "mask", ""),
        ("etc/ssh/ssh_host_rsa_key", "mask", ""),
        ("etc/ssl/private", "empty", ""),
        ("etc/app/db.conf", "mask", ""),
        ("sys/devices", "ro", ""),
    }


@pytest.mark.parametrize("nodes", ["mknod", "files"])
def test_the_gpu_part_on_a_simulated_layout(tmp_path, nodes):
    """Device nodes (char devices by mknod as root, else plain files: the glob decides, not the type), the
    driver's proc folder, toolkits under /usr/local and /opt, and the driver libraries' folders from
    ldconfig's cache, also outside /usr (a GPU operator's driver root); nothing else of /dev or /opt."""
    r = tmp_path
    dev = r / "dev"
    (dev / "nvidia-caps").mkdir(parents=True)
    names = ["nvidiactl", "nvidia0", "nvidia1", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset", "sda", "null"]
    names += ["nvidia-caps/nvidia-cap1"]
    for name in names:
        if nodes == "mknod":
            if os.geteuid() != 0:
                pytest.skip("mknod needs root")
            os.mknod(dev / name, 0o666 | stat.S_IFCHR, os.makedev(195, 0))
        else:
            (dev / name).write_text("")
    touch(r / "proc" / "driver" / "nvidia" / "version")
    for d in ("usr/local/cuda-12.4/lib64", "usr/local/nvidia/lib64", "opt/cuda/bin", "opt/conda", "opt/nvidia-ml"):
        (r / d).mkdir(parents=True)
    (r / "usr" / "local" / "cuda").symlink_to("cuda-12.4")
    libs = r / "usr" / "lib" / "x86_64-linux-gnu"
    driver = r / "run" / "nvidia" / "driver" / "lib64"
    for lib in (libs / "libcuda.so.1", driver / "libnvidia-ml.so.1", libs / "libz.so.1"):
        touch(lib)
    ldconfig = (
        "3 libs found in cache `/etc/ld.so.cache'\n"
        f"\tlibcuda.so.1 (libc6,x86-64) => {libs / 'libcuda.so.1'}\n"
        f"\tlibnvidia-ml.so.1 (libc6,x86-64) => {driver / 'libnvidia-ml.so.1'}\n"
        f"\tlibz.so.1 (libc6,x86-64) => {libs / 'libz.so.1'}\n"
    )
    got = {(str(b.path.relative_to(r)), b.mode) for b in gpu_binds(r, ldconfig)}
    dev_nodes = {"nvidiactl", "nvidia0", "nvidia1", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset", "nvidia-caps"}
    assert got == {
        *{(f"dev/{n}", "dev") for n in dev_nodes},
        ("proc/driver/nvidia", "ro"),
        ("usr/local/cuda", "ro"),
        ("usr/local/cuda-12.4", "ro"),
        ("usr/local/nvidia", "ro"),
        ("opt/cuda", "ro"),
        ("opt/nvidia-ml", "ro"),
        ("usr/lib/x86_64-linux-gnu", "ro"),
        ("run/nvidia/driver/lib64", "ro"),
    }
    # and the arguments: device nodes by --dev-bind after /dev, the driver's folder read-only
    fake = tuple(b for b in gpu_binds(r, ldconfig) if b.mode == "ro")
    args = bwrap_args(Policy(cwd=tmp_path, writable=(), readable=fake, gpu=False, system=False))
    assert ("--ro-bind", str(driver)) in ops(args)


def test_the_package_gives_a_sandbox_only_the_files_it_runs():
    package = ROOT / "bench"
    predictor = {b.path for b in package_binds("predictor")}
    agent = {b.path for b in package_binds("agent")}
    common = {package / "__init__.py", package / "sandbox" / "launcher.py"}
    # wire.py's WireError derives from bench.errors (standard library only): the predictor's view holds that file too
    scoring = {package / "scoring" / "predictor.py", package / "scoring" / "wire.py", package / "errors.py"}
    assert predictor == common | scoring
    assert agent == common | {package / "tracking" / "hook"}
    toolkit = {b.path for b in package_binds("agent", pythonpath=f"/elsewhere{os.pathsep}{ROOT}")}
    assert toolkit == agent | {ROOT / "bench", ROOT / "baselines"}  # the optuna agent: packages, not the repo


@pytest.mark.parametrize("purpose", ["agent", "predictor"])
def test_no_harness_place_and_not_the_repository_is_bound(purpose, tmp_path, monkeypatch):
    monkeypatch.setenv("BENCH_CACHE_DIR", str(tmp_path / "c"))
    policy = Policy(cwd=tmp_path, writable=(), readable=default_readable(purpose), hidden=default_hidden())
    bound = [b.path for b in plan(policy, socket_paths=()) if b.mode in ("ro", "rw")]
    for place in (ROOT, ROOT / "tasks", mlruns_dir(), cache_dir(), Path.home(), Path("/srv"), Path("/mnt")):
        assert all(p != place.resolve() and p not in place.resolve().parents for p in bound), (place, bound)
    assert not any(p.is_relative_to(ROOT / "tasks") or p.is_relative_to(mlruns_dir()) for p in bound)
    assert set(default_hidden()) >= {ROOT.resolve(), cache_dir().resolve(), mlruns_dir().resolve()}


def test_host_sockets_a_view_shows_are_masked_but_the_bridges(tmp_path):
    """A socket in a bound folder gets /dev/null over it; one in the runtime folder (the sandbox's own bridges),
    one in a folder nobody bound and a stale path that is no longer a socket do not."""
    bound, runtime, elsewhere = tmp_path / "prefix", tmp_path / "runtime", tmp_path / "elsewhere"
    servers, paths = [], {}
    for name, folder in (("bound", bound), ("runtime", runtime), ("elsewhere", elsewhere)):
        folder.mkdir()
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(folder / "s.sock"))
        servers.append(s)
        paths[name] = folder / "s.sock"
    touch(bound / "stale.sock")
    policy = Policy(cwd=bound, writable=(), readable=(bound,), scratch=(), gpu=False, system=False)
    try:
        masks = [b.path for b in plan(policy, runtime, [*paths.values(), bound / "stale.sock"]) if b.mode == "mask"]
        assert masks == [paths["bound"]]
        # the default: read from /proc/net/unix of this network namespace (the socket is listed there once bound)
        assert [b.path for b in plan(policy, runtime) if b.mode == "mask"] == [paths["bound"]]
    finally:
        for s in servers:
            s.close()


def test_the_root_is_never_hidden(tmp_path):
    """HOME=/ (a service account) must not turn into a tmpfs over the whole machine."""
    args = bwrap_args(Policy(cwd=tmp_path, writable=(tmp_path,), hidden=(Path("/"),), scratch=(), gpu=False))
    assert ("--tmpfs", "/") not in ops(args)


def test_bench_sandbox_view_prints_each_entry_with_its_mode_and_reason(capsys):
    from bench.cli import main

    assert main(["sandbox", "view", "--no-gpu"]) == 0
    out = capsys.readouterr().out
    agent, predictor = out.split("the predictor's sandbox")
    for text in (agent, predictor):
        assert "  ro       /usr " in text and ("  link     /bin -> usr/bin" in text or "  ro       /bin " in text)
        assert "  scratch  /tmp " in text and "/etc/shadow" in text and "secret" in text
        assert str(ROOT / "bench" / "sandbox" / "launcher.py") in text
        # the repository is never bound: it appears at most as an empty read-only folder, where it lies under a
        # place the sandbox mounts (a clone under /tmp: the sandbox's private /tmp holds its venv's mount point),
        # so that a write there fails loudly; nothing under it but the files bound above
        assert [line.split()[0] for line in text.splitlines() if line.split()[1:2] == [str(ROOT)]] in ([], ["empty"])
        assert str(ROOT / "tasks") not in text and str(ROOT / "mlruns") not in text
    assert "the agent's workspace" in agent and "/tracking/hook" in agent and "the predictor" not in agent
    assert "scoring/predictor.py" in predictor and "the staged evaluation folder" in predictor
    assert "/tracking/hook" not in predictor and "  rw " not in predictor  # the predictor writes nothing
