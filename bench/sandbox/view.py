"""The sandbox's allow-list: every path a sandbox sees, and why it is there.

Why an allow-list: a view of the whole machine minus the harness's known places leaves every place
nobody listed readable, and researchers keep copies of public datasets anywhere (``/data``,
``/scratch``, ``/mnt``, other users' homes, other repositories): one ``find / -iname '*etth1*'``
turns a forecasting task into a lookup. So a sandbox starts from an empty root and gets only what a
run needs, each entry with its reason:

- the system's programs and libraries: ``/usr`` (but of ``/usr/local`` only ``bin``, ``sbin``,
  ``lib*``, ``libexec``, ``include``), the merged-usr links ``/bin``, ``/sbin``, ``/lib*``; ``/etc``
  read-only with its secrets masked (every entry others may not read, and the usual ones by name);
  the parts of ``/sys`` that glibc, BLAS, node and NVML read (kernel file systems: nothing a user
  saves can live there);
- Python: the interpreter's prefixes (a venv's ``bin/python`` links into its base install), the
  site-packages in use and the folders their ``.pth`` files name, never the repository an editable
  install points into;
- of this package's own code, the files the sandbox runs: the launcher, the tracer hook (the
  agent's), the predictor and what it imports (the predictor's); all of ``bench/`` and
  ``baselines/`` only for an agent that is the toolkit's own code (its adapter puts the repository
  on its ``PYTHONPATH``: the optuna agent);
- the agent's: the pinned CLIs (and the base Python of a CLI's private venv) and the ``node``
  they run;
- the GPU's: its device nodes, ``/proc/driver/nvidia``, the driver's libraries wherever the dynamic
  linker finds them, CUDA under ``/usr/local/cuda*`` or ``/opt/cuda*``;
- per run (added by the policy): the workspace or the staged evaluation folder, a private HOME,
  private ``/tmp`` and ``/var/tmp``, a minimal ``/dev``, its own ``/proc``.

Each function takes the machine's root (or the text it parses) as a parameter, so a test can build a
fake layout and check exactly what would be bound. What it cannot see: a dataset copied into one of
these system places (``/usr/share``, a site-packages) stays readable; that is a machine's
administrator's doing, not a researcher's usual habit, and ``bench sandbox view`` prints the whole
list to check.
"""

from __future__ import annotations

import ast
import fnmatch
import os
import shutil
import site
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from bench import settings
from bench.paths import clis_dir

# modes of a Bind, in the order in which the same path's modes override each other (the later wins)
EMPTY, SCRATCH, RO, RW = "empty", "scratch", "ro", "rw"
DEV, LINK, MASK, DEVFS, PROCFS, RO_TRY = "dev", "link", "mask", "devfs", "procfs", "ro-try"

SYSTEM_DIRS = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32")
USR_LOCAL_KEPT = ("bin", "sbin", "lib", "lib64", "libexec", "include")
# /sys: CPU topology (glibc's CPU count, OpenBLAS, torch), PCI devices and the nvidia modules
# (NVML, CUDA), memory settings (allocators). Not /sys/fs/cgroup: the host's cgroup tree names
# other runs' groups and shows their memory counters (a channel); a sandbox sees only its run's own
# group there (bench.sandbox.Sandbox.wrap)
SYS_PARTS = ("devices", "bus", "class", "dev", "module", "kernel/mm")
# /etc entries masked even when others may read them (secrets by name); the rest of /etc
# is read-only
ETC_SECRETS = (
    "shadow*",
    "gshadow*",
    "sudoers",
    "sudoers.d",
    "ssl/private",
    "ssh/ssh_host_*_key",
    "security/opasswd",
    "*.keytab",
)
GPU_NODES = ("dev/nvidiactl", "dev/nvidia[0-9]*", "dev/nvidia-uvm*", "dev/nvidia-modeset", "dev/nvidia-caps")
GPU_TOOLKITS = ("usr/local/cuda*", "usr/local/nvidia", "opt/cuda*", "opt/nvidia*")
DRIVER_LIBS = ("libcuda.so*", "libnvidia-ml.so*", "libnvidia-ptxjitcompiler.so*")


@dataclass(frozen=True)
class Bind:
    """One entry of a view.

    ``path`` (the same inside and out), how it appears (``mode``) and why it is there.

    Modes: ``ro``/``rw`` a bind at the same path; ``dev`` a device node (``--dev-bind``); ``link`` a
    symlink to ``target``; ``empty`` a read-only empty tmpfs (a harness place under a bound path);
    ``scratch`` a private writable tmpfs; ``mask`` /dev/null over a file (a secret, a socket);
    ``devfs``/``procfs`` the sandbox's own ``/dev`` and ``/proc``; ``ro-try`` read-only when present
    (``/proc``'s kernel settings).
    """

    path: Path
    mode: str
    why: str
    target: str = ""


def system_binds(root: Path = Path("/")) -> list[Bind]:
    """The system's programs, libraries and configuration under ``root``.

    With the kernel's read-only facts.
    """
    out = []
    for name in SYSTEM_DIRS:
        path = root / name
        if path.is_symlink():  # merged /usr: /bin -> usr/bin keeps its meaning inside
            out.append(Bind(path, LINK, "merged-usr link, as on the host", os.readlink(path)))
        elif path.is_dir():
            out.append(Bind(path, RO, "system programs and libraries"))
    local = root / "usr" / "local"
    if local.is_dir() and not local.is_symlink():
        out.append(Bind(local, EMPTY, "/usr/local holds hand-installed things: only its program folders are kept"))
        out += [
            Bind(local / n, RO, "hand-installed programs and libraries") for n in USR_LOCAL_KEPT if (local / n).is_dir()
        ]
    if (root / "etc").is_dir():
        out.append(Bind(root / "etc", RO, "configuration read by common tools (users, DNS, TLS certificates, locale)"))
        out += etc_masks(root / "etc")
    out += [
        Bind(root / "sys" / p, RO, "kernel facts read by glibc, BLAS, node and NVML (no user files)")
        for p in SYS_PARTS
        if (root / "sys" / p).is_dir()
    ]
    return out


def etc_masks(etc: Path) -> list[Bind]:
    """What of ``etc`` is masked.

    Every entry others may not read (that is how secrets are kept: shadow, host keys, ssl/private,
    database passwords), and the known secrets by name whatever their mode.
    """
    out: list[Bind] = []
    for folder, dirs, files in os.walk(etc):
        for name in sorted(dirs) + sorted(files):
            path = Path(folder) / name
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if stat.S_ISLNK(st.st_mode):
                continue  # a link leads into a bound place (its own rules) or nowhere
            rel = str(path.relative_to(etc))
            private = not st.st_mode & stat.S_IROTH or (stat.S_ISDIR(st.st_mode) and not st.st_mode & stat.S_IXOTH)
            if private or any(fnmatch.fnmatchcase(rel, p) for p in ETC_SECRETS):
                is_dir = stat.S_ISDIR(st.st_mode)
                out.append(Bind(path, EMPTY if is_dir else MASK, "secret (not readable by others, or by name)"))
                if is_dir:
                    dirs.remove(name)
    return out


def gpu_binds(root: Path = Path("/"), ldconfig: str | None = None) -> list[Bind]:
    """What CUDA and NVML need under ``root``.

    The device nodes, ``/proc/driver/nvidia``, the driver's libraries (found through ``ldconfig``'s
    cache text, ``ldconfig -p`` when None) and the CUDA toolkits.
    """
    out = []
    for pattern in GPU_NODES:
        out += [Bind(Path(n), DEV, "NVIDIA device node") for n in sorted(root.glob(pattern))]
    if (root / "proc" / "driver" / "nvidia").is_dir():
        out.append(Bind(root / "proc" / "driver" / "nvidia", RO, "the driver's version and GPU list (NVML)"))
    for pattern in GPU_TOOLKITS:
        out += [Bind(Path(p), RO, "CUDA toolkit / driver files") for p in sorted(root.glob(pattern)) if p.is_dir()]
    text = _ldconfig() if ldconfig is None else ldconfig
    dirs = []
    for line in text.splitlines():
        lib = line.rpartition("=>")[2].strip()
        if "=>" in line and any(fnmatch.fnmatchcase(Path(lib).name, p) for p in DRIVER_LIBS):
            dirs.append(Path(lib).parent)
    out += [Bind(d, RO, "NVIDIA driver libraries (libcuda, libnvidia-ml)") for d in dict.fromkeys(dirs) if d.is_dir()]
    return out


def _ldconfig() -> str:
    for exe in ("ldconfig", "/sbin/ldconfig", "/usr/sbin/ldconfig"):
        path = shutil.which(exe)
        if path:
            try:
                return subprocess.run([path, "-p"], capture_output=True, text=True, timeout=10).stdout
            except (OSError, subprocess.SubprocessError):
                return ""
    return ""


def harness_places() -> tuple[Path, ...]:
    """The harness's own places, never visible and never writable by a sandbox.

    The repository (tasks, the tracking store), the cache (prepared data, other runs), workspaces,
    the store, the data mirror, the user's home, the machine's temp and runtime folders. A sandbox
    sees one only where a bound path lies under it.
    """
    from bench.paths import ROOT, cache_dir, mlruns_dir, workspaces_dir

    paths = [
        ROOT,
        cache_dir(),
        workspaces_dir(),
        mlruns_dir(),
        Path.home(),
        Path("/tmp"),
        Path("/var/tmp"),
        Path("/run"),
    ]
    if (mirror := settings.DATA_MIRROR.get()) is not None:
        paths.append(mirror)
    return tuple(dict.fromkeys(Path(os.path.realpath(p)) for p in paths))


def _venv_base(prefix: Path) -> Path | None:
    """The base install of the venv at ``prefix``.

    Its pyvenv.cfg's ``home`` is the base's bin folder.
    """
    try:
        lines = (prefix / "pyvenv.cfg").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        key, _, value = line.partition("=")
        if key.strip() == "home" and value.strip():
            return Path(value.strip()).parent
    return None


def python_binds(python: str = sys.executable) -> list[Bind]:
    """The interpreter ``python`` and what it imports from.

    Its prefixes, the site-packages in use and the folders their .pth files name (the repository an
    editable install names is left out: see package_binds).
    """
    from bench.paths import ROOT

    exe = Path(python)
    prefixes = [Path(p) for p in dict.fromkeys((sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix))]
    if exe.resolve() != Path(sys.executable).resolve():  # another interpreter: its venv and base from its files
        prefixes = [exe.parent.parent, *filter(None, [_venv_base(exe.parent.parent)])]
    out = [Bind(p, RO, "the Python interpreter's prefix (standard library, site-packages)") for p in prefixes]
    out += [Bind(d, RO, "the interpreter's folder") for d in dict.fromkeys((exe.parent, exe.resolve().parent))]
    sites = [Path(p) for p in site.getsitepackages()] if exe.resolve() == Path(sys.executable).resolve() else []
    out += [Bind(s, RO, "site-packages in use") for s in sites if s.is_dir()]
    root = ROOT.resolve()
    for folder in sites:
        for pth in sorted(folder.glob("*.pth")) if folder.is_dir() else ():
            for line in pth.read_text(errors="replace").splitlines():
                line = line.strip()
                if not line or line.startswith(("#", "import ", "import\t")):
                    continue
                path = (folder / line).resolve()
                if path.is_dir() and path != root and root not in path.parents and path not in root.parents:
                    out.append(Bind(path, RO, f"named by {pth.name} in site-packages"))
    return out


def _imported_files(start: Path, package: Path) -> list[Path]:
    """``start`` and the files of ``package`` it imports, transitively.

    Read from the source, not run.
    """
    seen: list[Path] = []
    todo = [start]
    while todo:
        path = todo.pop()
        if path in seen or not path.is_file():
            continue
        seen.append(path)
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            for name in names:
                parts = name.split(".")
                if parts[0] != package.name:
                    continue
                base = package.joinpath(*parts[1:])
                for i in range(1, len(parts)):  # every package on the way: its __init__.py
                    todo.append(package.joinpath(*parts[1:i], "__init__.py"))
                todo += [base.with_suffix(".py"), base / "__init__.py"]
    return seen


def package_binds(purpose: str, pythonpath: str = "") -> list[Bind]:
    """This package's files a sandbox runs.

    ``purpose``: ``agent`` (the launcher, the tracer hook) or ``predictor`` (the launcher, the
    predictor and what it imports). ``pythonpath``: the agent's own PYTHONPATH; naming the
    repository (the toolkit's own agent) adds the toolkit's packages, not the repository.
    """
    import bench
    from bench.paths import ROOT
    from bench.tracking import HOOK_DIR

    package = Path(bench.__file__).resolve().parent
    launcher = package / "sandbox" / "launcher.py"
    out = [Bind(package / "__init__.py", RO, "the package's marker (imports of bench.*)")]
    out.append(Bind(launcher, RO, "the sandbox's first process (network bridges, signals)"))
    if purpose == "agent":
        out.append(Bind(HOOK_DIR.resolve(), RO, "the script tracer (sitecustomize on PYTHONPATH)"))
        entries = {Path(p).resolve() for p in pythonpath.split(os.pathsep) if p}
        if ROOT.resolve() in entries:
            why = "the toolkit's own agent (its adapter puts the repository on PYTHONPATH): its packages only"
            out += [Bind(ROOT.resolve() / n, RO, why) for n in ("bench", "baselines") if (ROOT / n).is_dir()]
    elif purpose == "predictor":
        for path in _imported_files(package / "scoring" / "predictor.py", package):
            if path != package / "__init__.py":
                out.append(Bind(path, RO, "the predictor and the package files it imports"))
    else:
        raise ValueError(f"purpose is 'agent' or 'predictor', not {purpose!r}")
    return out


def cli_binds(node: str | None = None) -> list[Bind]:
    """The pinned agent CLIs and what they run on, when it lives outside /usr.

    The base Python of a CLI's private venv (Aider's) and ``node`` (found on PATH when None), when
    they live outside /usr (nvm, a tarball under /opt).
    """
    out = []
    folder = clis_dir()
    if folder.is_dir():
        out.append(Bind(folder, RO, "the pinned agent CLIs (bench agents install)"))
        for cfg in sorted(folder.glob("*/venv/pyvenv.cfg")):
            base = _venv_base(cfg.parent)
            if base is not None and base.is_dir():
                out.append(Bind(base.resolve(), RO, f"the base Python of {cfg.parent.parent.name}'s venv"))
    node = node or shutil.which("node")
    if node:
        prefix = Path(node).resolve().parent.parent
        if prefix != Path("/usr") and Path("/usr") not in prefix.parents:
            out.append(Bind(prefix, RO, "Node.js, which the npm CLIs run on"))
    return out


def readable_binds(purpose: str, python: str = sys.executable, pythonpath: str = "") -> list[Bind]:
    """Everything a sandbox of ``purpose`` reads beyond the system.

    Python, this package's files, the CLIs.
    """
    out = python_binds(python) + package_binds(purpose, pythonpath)
    return out + cli_binds() if purpose == "agent" else out
