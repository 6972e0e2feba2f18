"""The user guide's examples work as written: every shell command in a fenced block of README.md or docs/*.md is
run here, or listed in SKIP with the reason it is not (a GPU, an API key, a long run, a server).

A new example is therefore run by default; one that cannot run here must be skipped on purpose, with its reason.
Commands run in a temporary cache and store (never the user's ``~/.cache/1gc-7rc`` or ``mlruns/``), in a folder
holding the campaign files the docs show, against a small generated store with the campaigns the docs name (the
runs carry ``bench.synthetic=true``). Commands that need real data run when ``BENCH_DATA_MIRROR`` is set.
The docs' links, campaign files and mirror layout are checked too: a page that points nowhere teaches nothing.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELL = {"bash", "sh", "shell"}
FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```[ \t]*$", re.M | re.S)

KEY = "needs an API key and a model endpoint"
GPU_LONG = "a benchmark run on a GPU: hours, and API keys"
SERVER = "starts a server that runs until stopped"
PLACEHOLDER = "a placeholder value for the reader to fill in"

# command (as written, comments stripped) -> why it is not run here
SKIP: dict[str, str] = {
    "make demo": "installs the toolkit and runs ~10 min (the demo's own test covers it)",
    "make test": "the fast tier of the test suite: minutes (CI runs it: test_ci_runs_the_readmes_test_commands)",
    "make test-slow": "the slow tier: tens of minutes (CI runs it: test_ci_runs_the_readmes_test_commands)",
    "make gpu-proof": GPU_LONG,
    "bench selftest --device cpu --out selftest-report": "30-50 s, run by tests/bench/test_selftest.py",
    "make gpu-proof-bundle": "downloads wheels from PyPI: minutes, and network",
    "sh .gpu-proof/run.sh --out selftest-report": GPU_LONG + " (and the bundle)",
    "make ui": SERVER,
    "make lab": SERVER + " (and installs the lab extra)",
    "bench run --agent baseline --task t6 --budget 3m --repeats 5 --campaign mine": "five runs: > 1 min on 2 cores",
    "bench ui --experiment mine": SERVER,
    "bench ui": SERVER,
    "bench ui --experiment mine --port 5001": SERVER,
    "bench ui --experiment two-agents": SERVER,
    "export ANTHROPIC_API_KEY=sk-ant-...": PLACEHOLDER + " (a key)",
    "export OPENAI_API_KEY=sk-...": PLACEHOLDER + " (a key)",
    "export BENCH_DATA_MIRROR=/path/to/data": PLACEHOLDER + "; the test uses BENCH_DATA_MIRROR when it is set",
    "bench agents install claude-code codex": "downloads from npm's registry: minutes, and network",
    "bench agents install all": "downloads from npm's registry and PyPI: minutes, and network",
    "bench campaign run two-agents.toml": GPU_LONG,
    "bench campaign run pilot.toml": GPU_LONG,
    "bench campaign resume pilot.toml": GPU_LONG,
    "bench data prepare t1,t6": "T1 and T6 together: run below one by one (bench data prepare t6, t1)",
    "bench tasks check tasks/t6_time_series_forecasting": "trains T6's baseline (~30 s): test_check.py runs it",
    "pip install ./docs/example-pack": "installs a package into the environment: tests/bench/tasks/"
    "test_example_pack.py installs it into a temporary folder, offline, and runs the commands below",
    "bench tasks check docs/example-pack/bench_example_pack/spirals": "trains the example's baseline (~25 s): "
    "test_example_pack.py runs it on the installed pack",
    "bench run --agent baseline --task spirals --budget 2m": "needs the example pack installed (the pip install "
    "above): test_example_pack.py runs it",
    "bench run --agent claude-code --model claude-opus-4-7 --task t1": KEY,
    "bench run --agent optuna --task t6 --budget 5m": "5 minutes of trials",
    "bench run --resume ~/.cache/1gc-7rc/workspaces/mine/t6-baseline-r1-20250101-120000": PLACEHOLDER
    + " (a run directory whose harness died)",
    "bench run --resume mine --agent baseline --task t6 --repeats 5": "five runs: > 1 min on 2 cores",
    "bench weights install dinov3_convnext_tiny_pretrain_lvd1689m-21b726bb.pth "
    "dinov3_vits16_pretrain_lvd1689m-08c60483.pth": "needs the gated DINOv3 files, downloaded by hand",
    "bench baselines tune --task t6 --trials 40 --budget 10m": "10 minutes of trials",
    "bench optuna-dashboard": SERVER,
    "pip install -e '.[postgres]'": "installs packages into the environment",
    ".venv/bin/pip install -e '.[lab]'": "installs packages into the environment",
    ".venv/bin/jupyter lab notebooks/": SERVER,
    "bench server --postgres /shared/bench-pg --host 0.0.0.0 --port 5000 --artifacts-destination "
    "/shared/bench-artifacts": SERVER + " (and PostgreSQL)",
    "export MLFLOW_TRACKING_URI=http://head:5000": PLACEHOLDER + " (a cluster's head node)",
    "export BENCH_TRACKING_DB=postgresql+psycopg://postgres@127.0.0.1:5432/mlflow": PLACEHOLDER + " (a database)",
    "bench baselines tune --task t6 --storage postgresql+psycopg://postgres@127.0.0.1:5432/optuna": SERVER
    + " is needed first (PostgreSQL), then a tuning run of the task's budget",
    "BENCH_MLRUNS_DIR=theirs bench report --experiment mine --out report-theirs": "needs the import above first "
    "(examples run in any order): tests/bench/test_bundle.py compares an imported campaign's report tables",
}

# commands that read the real data: run when BENCH_DATA_MIRROR is set (they copy from it, then prepare)
NEEDS_DATA = {
    "bench data prepare t6",
    "bench data prepare t1",
    "bench run --agent baseline --task t6",
    "bench run --agent command --agent-command 'cp train.py run_1.py && python run_1.py' --task t6 --budget 2m",
}

# command -> (exit status, text its output must hold); default (0, "")
EXPECT: dict[str, tuple[int, str]] = {
    "bench agents check": (0, "no credential: set ANTHROPIC_API_KEY"),  # no key here; exit 1 only for agents named
    "bench agents check claude-code codex": (1, "no credential: set OPENAI_API_KEY"),
    "bench agents check claude-code --model claude-opus-4-7": (1, "claude-code"),
    "bench campaign status two-agents.toml": (0, "0/20 final"),
    "bench campaign status pilot.toml": (0, "0/20 final"),
    "bench campaign plan campaigns/paper.toml": (0, "245 runs = 7 agent(s) x 7 task(s) x 5 repeat(s)"),
    "bench tasks": (0, "t6_time_series_forecasting"),
    "bench run --resume mine": (2, "no campaign 'mine' here"),  # no run of campaign mine was made here: bad input
    "bench sandbox view": (0, "the predictor's sandbox"),
    "bench report --experiment mine --out report-mine": (0, "index.md"),
    "bench export mine mine.tar.gz": (0, "mine.tar.gz: "),
    "BENCH_MLRUNS_DIR=theirs bench import mine.tar.gz --runs-dir theirs/runs": (0, "runs imported"),
    # the synthetic campaign's bundle has MLflow runs and no run folders: verify names each run it cannot re-score
    # (tests/bench/test_verify.py verifies a real T6 run's bundle: exit 0, every score bitwise equal)
    "bench verify mine.tar.gz": (1, "it cannot be re-scored"),
    "bench data prepare t6": (0, "t6: prepared data"),
    "bench run --agent baseline --task t6": (0, "success"),
    "bench run --agent command --agent-command 'cp train.py run_1.py && python run_1.py' --task t6 --budget 2m": (
        0,
        "success",
    ),
}

SYNTHETIC_CAMPAIGNS = ("mine", "two-agents")  # the campaigns the docs report on


def _strip_comment(line: str) -> str:
    """The line without its shell comment: a '#' outside quotes that starts a word."""
    quote = ""
    for i, ch in enumerate(line):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


def fences(path: Path) -> list[tuple[str, str]]:
    """(language, text) of each fenced block of a Markdown file."""
    return [(m.group(1).strip(), m.group(2)) for m in FENCE.finditer(path.read_text())]


def commands(text: str) -> list[str]:
    """The commands of a shell block: comments dropped, backslash continuations joined, spaces collapsed."""
    out, pending = [], ""
    for raw in text.splitlines():
        line = _strip_comment(raw)
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = " ".join((pending + line).split())
        pending = ""
        if line:
            out.append(line)
    return out


def examples() -> list[tuple[str, str]]:
    """(file, command) for every command shown in a shell block."""
    return [
        (path.relative_to(ROOT).as_posix(), cmd)
        for path in DOCS
        for lang, text in fences(path)
        if lang in SHELL
        for cmd in commands(text)
    ]


EXAMPLES = examples()
TO_RUN = sorted({cmd for _, cmd in EXAMPLES if cmd not in SKIP})


def test_the_docs_have_examples_and_every_fence_says_its_language() -> None:
    """An untagged fence could hide a command from this test: every block says bash, toml, text, python, ..."""
    untagged = [p.relative_to(ROOT).as_posix() for p in DOCS for lang, _ in fences(p) if not lang]
    assert untagged == [], f"give these fences a language (bash for commands, text for output): {untagged}"
    assert len(TO_RUN) >= 10 and len(EXAMPLES) >= 30, (len(TO_RUN), len(EXAMPLES))


def test_every_skipped_example_is_still_shown() -> None:
    """A skip list entry whose example left the docs is stale: it would skip a command nobody reads."""
    shown = {cmd for _, cmd in EXAMPLES}
    assert sorted(set(SKIP) - shown) == [] and sorted(NEEDS_DATA - shown) == [] and sorted(set(EXPECT) - shown) == []


@pytest.fixture(scope="module")
def docs_env(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A working folder with the docs' campaign files, and an environment whose cache and store are temporary and
    hold a small generated campaign for each name the docs report on; no API key, no tracking server."""
    base = tmp_path_factory.mktemp("docs")
    work, home = base / "work", base / "home"
    work.mkdir()
    home.mkdir()
    for path in DOCS:
        for lang, text in fences(path):
            if lang == "toml" and "name" in (spec := tomllib.loads(text)):
                (work / f"{spec['name']}.toml").write_text(text)
    shutil.copytree(ROOT / "campaigns", work / "campaigns")  # the campaign files the repository ships
    secret = re.compile(r"^(MLFLOW_|BENCH_|ANTHROPIC_|OPENAI_|CODEX_|CLAUDE_|GEMINI_|GOOGLE_|OPENROUTER_)")
    env = {k: v for k, v in os.environ.items() if not secret.match(k)}
    env.update(
        HOME=str(home),
        BENCH_CACHE_DIR=str(base / "cache"),
        BENCH_MLRUNS_DIR=str(base / "mlruns"),
        BENCH_API_CHECK="0",
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    )
    if os.environ.get("BENCH_DATA_MIRROR"):
        env["BENCH_DATA_MIRROR"] = os.environ["BENCH_DATA_MIRROR"]
    spec = importlib.util.spec_from_file_location("docs_synthetic", ROOT / "tests" / "analysis" / "synthetic.py")
    names = ", ".join(repr(c) for c in SYNTHETIC_CAMPAIGNS)
    code = (
        f"import importlib.util, sys; spec = importlib.util.spec_from_file_location('s', {str(spec.origin)!r}); "
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); "
        f"[m.generate(c, agents=2, tasks=2, repeats=2, scripts=1, evals=1, fail_every=0) for c in ({names},)]"
    )
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, check=True, timeout=300)
    # the bundle docs/publishing.md imports, here whichever of its examples runs first (and on whichever worker)
    subprocess.run(["bench", "export", "mine", "mine.tar.gz", "--quiet"], cwd=work, env=env, check=True, timeout=300)
    return work, env


@pytest.mark.parametrize("cmd", TO_RUN)
def test_example_runs_as_written(cmd: str, docs_env: tuple[Path, dict[str, str]]) -> None:
    work, env = docs_env
    if cmd in NEEDS_DATA:
        if not env.get("BENCH_DATA_MIRROR"):
            pytest.skip("needs the real data: set BENCH_DATA_MIRROR")
        if " run " in f" {cmd} ":
            from bench.sandbox.bwrap import probe

            if (why := probe()) is not None:
                pytest.skip(f"no usable sandbox here: {why}")
    status, text = EXPECT.get(cmd, (0, ""))
    done = subprocess.run(
        ["bash", "-c", cmd], cwd=work, env=env, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL
    )
    output = done.stdout + done.stderr
    assert done.returncode == status, f"{cmd!r} exited {done.returncode}, the docs expect {status}:\n{output[-3000:]}"
    assert text in output, f"{cmd!r} printed no {text!r}:\n{output[-3000:]}"


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text())
    return {_slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", text, re.M)}


def test_every_link_between_the_pages_arrives() -> None:
    """Relative links (files and #anchors) from README.md, docs/ and ARCHITECTURE.md point at what exists."""
    broken = []
    for path in [*DOCS, ROOT / "ARCHITECTURE.md"]:
        text = FENCE.sub("", path.read_text())
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            file, _, anchor = target.partition("#")
            dest = (path.parent / file).resolve() if file else path
            if not dest.exists() or (anchor and dest.is_file() and anchor not in _anchors(dest)):
                broken.append(f"{path.relative_to(ROOT)}: {target}")
    assert broken == []


def test_the_mirror_layout_names_every_file_a_task_reads() -> None:
    """docs/tasks-and-data.md's table is how a user lays out an offline mirror: every task.toml's mirror path is
    in it, so a new data source cannot be added without saying where it goes."""
    page = (ROOT / "docs" / "tasks-and-data.md").read_text()
    paths = {
        source["mirror"]
        for toml in sorted((ROOT / "tasks").glob("*/task.toml"))
        for source in tomllib.loads(toml.read_text()).get("data", [])
    }
    paths |= {
        source["manifest"]
        for toml in sorted((ROOT / "tasks").glob("*/task.toml"))
        for source in tomllib.loads(toml.read_text()).get("data", [])
        if "manifest" in source
    }
    assert len(paths) >= 15
    assert sorted(p for p in paths if f"`{p}`" not in page) == []


def test_readme_is_short_and_no_page_cites_internal_issues() -> None:
    """The README teaches the first hour (under 200 lines); the rest is in docs/. Issue numbers mean nothing to a
    reader outside the project."""
    assert len((ROOT / "README.md").read_text().splitlines()) < 200
    cited = [
        f"{p.relative_to(ROOT)}: {m.group(0)}"
        for p in [*DOCS, ROOT / "ARCHITECTURE.md"]
        for m in re.finditer(r"\bissues? #?\d+", p.read_text(), re.I)
    ]
    assert cited == []


def test_the_settings_table_is_the_one_bench_settings_prints() -> None:
    """docs/runs.md shows every environment override as ``python -m bench.settings`` prints it: a setting added,
    renamed or given another default cannot leave the user guide behind."""
    from bench import settings

    assert settings.table().strip() in (ROOT / "docs" / "runs.md").read_text()


# --- numbers the docs state that the code can count ---------------------------------------------------------------
WORDS = dict(zip("one two three four five six seven eight nine ten eleven twelve".split(), range(1, 13), strict=True))
PAGES = [*DOCS, ROOT / "ARCHITECTURE.md"]


def _stated(pattern: str) -> list[tuple[str, int]]:
    """(where, number) for each match of ``pattern`` (its group 1: a number word or digits) in the pages' prose and
    examples, e.g. ``the (\\w+) tasks``."""
    found = []
    for path in PAGES:
        for m in re.finditer(pattern, path.read_text(), re.I):
            word = m.group(1).lower().replace(",", "")
            number = WORDS.get(word) if not word.isdigit() else int(word)
            if number is not None:
                found.append((f"{path.relative_to(ROOT)}: {m.group(0)!r}", number))
    return found


def _counts() -> dict[str, tuple[str, int]]:
    """What the code says, each by the pattern of the docs' sentence that states it."""
    from bench.agents.install import CLIS
    from bench.rules.context import RULES
    from bench.tracking import views

    paper = tomllib.loads((ROOT / "campaigns" / "paper.toml").read_text())
    tasks = len(list((ROOT / "tasks").glob("*/task.toml")))  # the built-in tasks (task packs come on top)
    paper_tasks = tasks if paper["tasks"] == "all" else len(paper["tasks"])
    return {
        "built-in tasks": (r"\bthe (\w+) tasks\b", tasks),
        "rules": (r"\b(\w+) rules\b", len(RULES)),
        "agent CLIs": (r"\b(\w+) CLIs\b", len(CLIS)),
        "npm CLIs": (r"\b(\w+) npm CLIs\b", sum(c.kind == "npm" for c in CLIS.values())),
        "the paper's agents": (r"\b(?:Table 3's|the) (\w+) agents (?:of its Table 3|x)", len(paper["agents"])),
        "the paper's runs": (r"paper[^\n]*?\b([\d,]+) runs\b", len(paper["agents"]) * paper_tasks * paper["repeats"]),
        "views per campaign": (r"\b(\w+) views per campaign\b", len(views.all_views())),
    }


def test_the_counts_the_docs_state_are_the_codes() -> None:
    """A number the docs state and the code can count (seven tasks, nine rules, five CLIs, four of them npm's, the
    paper's study's agents and runs, three views per campaign) equals the code's count: a task, a rule, an agent or a
    view added cannot leave a stale number behind. Each pattern must find its number somewhere, so a reworded
    sentence is noticed too. The README's test counts and times are measured, not computed: not checked here."""
    stale, unmatched = [], []
    for what, (pattern, expected) in _counts().items():
        stated = _stated(pattern)
        if not stated:
            unmatched.append(what)
        stale += [f"{where}: {n}, but the code has {expected} {what}" for where, n in stated if n != expected]
    assert stale == [] and unmatched == []


def test_the_data_states_the_docs_list_are_the_ones_bench_tasks_shows() -> None:
    """``bench tasks``'s data column (bench/tasks/data.py:data_status, read from its source: every string it
    returns) is listed whole, in the docs' comment on ``bench tasks``."""
    import ast
    import inspect

    from bench.tasks import data

    tree = ast.parse(inspect.getsource(data.data_status))
    states = {
        v.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Return) and node.value is not None
        for v in ast.walk(node.value)
        if isinstance(v, ast.Constant) and isinstance(v.value, str)
    }
    assert {"missing", "raw", "raw (partial)", "prepared", "prepared (partial)"} <= states
    page = (ROOT / "docs" / "tasks-and-data.md").read_text()
    line = next(line for line in page.splitlines() if "data column" in line)
    listed = {s.strip() for s in line.split("data column:")[1].split(", ")}
    assert listed == states


def test_every_docs_section_a_file_cites_exists() -> None:
    """A file that cites a page's section by name (``docs/extending.md, "An example pack"``) cites a heading that
    exists (or a heading's start: "Logins" for "Logins: Claude, ChatGPT and Google subscriptions"): the example pack's
    task.toml named one that never did."""
    cited = re.compile(r"\b((?:docs/)?[\w-]+\.md), \"([^\"]+)\"")
    sources = [p for p in ROOT.rglob("*") if p.suffix in {".py", ".toml", ".md"} and ".venv" not in p.parts]
    broken = []
    for path in sources:
        if any(part.startswith(".") or part in {"node_modules", "build"} for part in path.relative_to(ROOT).parts):
            continue
        for m in cited.finditer(path.read_text(errors="replace")):
            page = ROOT / m.group(1) if m.group(1).startswith("docs/") else ROOT / "docs" / m.group(1)
            if page.exists() and not any(a.startswith(_slug(m.group(2))) for a in _anchors(page)):  # or its start
                broken.append(f"{path.relative_to(ROOT)}: {m.group(0)}")
    assert broken == []


def test_ci_runs_the_readmes_test_commands() -> None:
    """Each test command the README gives (its ``make test...`` lines) is a command line of ``.ci/run``, in the
    README's order: what CI proves is what a user types."""
    readme = (ROOT / "README.md").read_text()
    given = [m.split("#")[0].strip() for m in re.findall(r"^make test\S*[^\n]*", readme, re.M)]
    assert given == ["make test", "make test-slow"], given
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines() if not line.lstrip().startswith("#")]
    assert [c for c in ci if c in given] == given, ci
