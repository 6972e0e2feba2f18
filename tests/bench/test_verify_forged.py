"""A score that carries its labels, caught at run time and by `bench verify` of the bundle that holds it.

The candidate is the issue's forgery: the task's own DLinear plus a buffer holding the test split, which its forward
looks each input window up in (the answers come out exact). To get the (public, for ETTh1) test split into a
checkpoint, the command agent runs unsandboxed and copies the harness's prepared ``test.npy``; the run is then
recorded as the harness records any run. The audit disqualifies it for the targets the checkpoint carries, naming
the tensor; the bundle's verify re-scores it, finds them again and exits 1 with the finding named, even though the
recorded verdict is recomputed as recorded.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json

import pytest

from bench.cli import main
from tests.tasks import test_label_scan

CAMPAIGN = "verify-forged"
# the forged model of tests/tasks/test_label_scan.py, with a main that builds it around the copied test split
FORGED = (
    test_label_scan.FORGED
    + """

if __name__ == "__main__":
    import numpy as np
    from prepare import save_checkpoint

    series = torch.from_numpy(np.load("lookup.npy").astype(np.float32))
    model = Forged({"base": train.CONFIG, "rows": len(series)})
    model.lookup.copy_(series)
    save_checkpoint(model, {"base": train.CONFIG, "rows": len(series)}, 0.5, step=1)
"""
)


@pytest.mark.slow  # a whole benchmark run, its export and a verification that re-scores it
def test_a_checkpoint_carrying_the_test_split_is_caught_at_run_time_and_by_verify_of_its_bundle(generated_t6, tmp_path):
    from bench.pipeline import workspace
    from bench.tasks import data

    test = data.prepared_dir(generated_t6) / "test.npy"
    assert test.is_file()
    source = base64.b64encode(FORGED.encode()).decode()
    command = f"cp {test} lookup.npy && printf %s {source} | base64 -d > forged.py && python forged.py"
    argv = ["run", "--agent", "command", "--agent-command", command, "--task", "t6", "--budget", "1m", "--grace", "5"]
    main([*argv, "--campaign", CAMPAIGN, "--unsandboxed", "--quiet", "--no-summary"])
    (run_dir,) = list(workspace.campaign_dir(CAMPAIGN).iterdir())
    result = json.loads((run_dir / "result.json").read_text())
    best = next(e for e in result["evaluations"] if e["candidate"] == "best")
    assert best["official"]["value"] < 1e-6, best["official"]  # the lookup answers the test split exactly
    carried = [v for v in result["audit"]["violations"] if "(tensor 'lookup')" in v["reason"]]
    assert result["outcome"]["status"] == "disqualified" and carried and carried[0]["verdict"] == "disqualify"

    archive = tmp_path / "forged.tar.gz"
    assert main(["export", CAMPAIGN, str(archive), "--quiet"]) == 0
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["verify", str(archive), "--quiet"])
    text = out.getvalue()
    assert code == 1, text
    assert "score check, rule 9 disqualify" in text and "(tensor 'lookup')" in text, text
    assert "flagged by the score checks" in text and "verdict: recorded" not in text, text  # recomputed as recorded
