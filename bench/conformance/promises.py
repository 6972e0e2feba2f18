"""The judgements of ``bench tasks check`` and the conformance tests.

Each returns the broken promises as lines saying what to change (an empty list: the promise is
kept). No I/O beyond reading what is passed in.

The contracts (the table of docs/extending.md):
  * checkpoint: a file in checkpoints/ whose payload holds the state dict, the config for
    build_model, the script name, the self-reported validation score, the metric name and a
    timestamp, saved through the locked prepare.save_checkpoint(), so that the baseline train.py
    already follows it;
  * official result: `prepare.py --eval` prints one JSON object (task, metric, value, direction,
    split, checkpoint, script, seconds);
  * every bad input gives one JSON line with an error (exit status 1), never a score and never a
    bare traceback;
  * the val_score a script reports is the evaluator's own score on the validation split (the
    harness ranks checkpoints by it; rule 9 compares it with the scorer's own validation score);
  * the eval split's labels never reach a workspace when they are not the validation split's
    (task.toml held_out);
  * the trusted scorer gives the task's own --eval number, and an honest baseline passes every
    probe.
"""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

from bench.conformance.cases import Bad

CONTRACT_KEYS = {"task", "metric", "value", "direction", "split", "checkpoint", "script", "seconds"}
PAYLOAD_KEYS = {"state_dict", "config", "script", "val_score", "metric", "time"}
# The val_score a baseline reports is computed in its training process by the same evaluation code
# as `prepare.py --eval`, on the same CPU (CUDA hidden while training, so no bf16 autocast or TF32
# enters a self-reported score), but with its own evaluation batch size: float32 results of
# differently shaped matrix products may differ in the last bits (float32 eps = 1.2e-7), and the
# per-sample losses are then summed in float64. 1e-6 relative allows ~8 ulps; counted metrics
# (accuracy, AUROC, mIoU) must match exactly in practice, since one sample or pixel moves them by
# far more than that.
REL = 1e-6
# the probes an honest model passes on any feed (history independence needs more than one scored
# batch)
PROBES_ALWAYS = {"determinism", "batch-independence"}
PROBES_ALL = {"determinism", "history-independence", "batch-independence", "causality"}
HELP_OPTIONS = ("--prepare", "--raw-dir", "--data-dir", "--eval", "--script", "--device")


def close(a: float, b: float, rel: float = REL, abs_tol: float = 0.0) -> bool:
    """Whether ``a`` and ``b`` agree within ``rel`` of the larger (or within ``abs_tol``)."""
    return abs(a - b) <= max(abs_tol, rel * max(abs(a), abs(b)))


def one_json_line(stdout: str) -> tuple[dict | None, str | None]:
    """(the JSON object, None) when stdout is exactly one line holding one.

    Else (None, what is wrong).
    """
    lines = stdout.splitlines()
    if len(lines) != 1:
        shown = " | ".join(lines[:3])[:300]
        return None, f"printed {len(lines)} lines on stdout, not one JSON line (print nothing else): {shown!r}"
    try:
        result = json.loads(lines[0])
    except json.JSONDecodeError:
        return None, f"printed a line that is not JSON: {lines[0][:200]!r}"
    if not isinstance(result, dict):
        return None, f"printed JSON that is not an object: {lines[0][:200]!r}"
    return result, None


def payload_problems(name: str, payload: object, toml: dict, given: dict, started: float, finished: float) -> list[str]:
    """The output contract of one baseline checkpoint, loaded with weights_only.

    ``name`` names it in the lines.
    """
    import torch

    where = f"checkpoint {name}"
    if not isinstance(payload, dict) or not PAYLOAD_KEYS <= payload.keys():
        keys = sorted(payload) if isinstance(payload, dict) else type(payload).__name__
        return [
            f"{where}: the payload needs the keys {sorted(PAYLOAD_KEYS)} (has {keys}): "
            "save it through prepare.save_checkpoint"
        ]
    out = []
    state = payload["state_dict"]
    if not state or not all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()):
        out.append(f"{where}: state_dict must map parameter names to tensors (model.state_dict())")
    elif any(k.startswith("_orig_mod.") for k in state):
        out.append(
            f"{where}: state_dict keys start with _orig_mod. (a torch.compile'd model): save the original module's"
        )
    config = payload["config"]
    try:
        json.dumps(config)
    except (TypeError, ValueError):
        out.append(f"{where}: config must hold plain values (the harness records it as MLflow params)")
    else:
        if not isinstance(config, dict) or {k: config.get(k) for k in given} != given:
            out.append(f"{where}: config must be the config train.main() was given (what build_model(config) rebuilds)")
    if payload["script"] != "train.py":
        out.append(f"{where}: script is {payload['script']!r}, not the name the script ran under (train.py)")
    if type(payload["val_score"]) is not float or not math.isfinite(payload["val_score"]):
        out.append(f"{where}: val_score must be a finite float, is {payload['val_score']!r}")
    if payload["metric"] != toml.get("metric"):
        out.append(f"{where}: metric is {payload['metric']!r}, task.toml says {toml.get('metric')!r}")
    if not (isinstance(payload["time"], (int, float)) and started <= payload["time"] <= finished):
        out.append(f"{where}: time must be when it was saved (time.time()), is {payload['time']!r}")
    return out


def eval_line_problems(proc: subprocess.CompletedProcess, toml: dict, ws: Path, ckpt: Path, wall: float) -> list[str]:
    """`prepare.py --eval CKPT` on a good checkpoint: exit 0 and the contract's one JSON object."""
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr).strip()[-500:]
        return [f"prepare.py --eval of the baseline's checkpoint exited {proc.returncode}: {tail}"]
    result, wrong = one_json_line(proc.stdout)
    if wrong:
        return [f"prepare.py --eval {wrong}"]
    if missing := CONTRACT_KEYS - result.keys():
        return [f"prepare.py --eval: its JSON lacks {sorted(missing)} (the contract: {sorted(CONTRACT_KEYS)})"]
    out = []
    for key, declared in (("task", "id"), ("metric", "metric"), ("direction", "direction"), ("split", "eval_split")):
        if result[key] != toml.get(declared):
            out.append(f"prepare.py --eval: {key} is {result[key]!r}, task.toml's {declared} is {toml.get(declared)!r}")
    if type(result["value"]) is not float or not math.isfinite(result["value"]):
        out.append(f"prepare.py --eval: value must be a finite float, is {result['value']!r}")
    if not (ws / str(result["checkpoint"])).resolve() == ckpt.resolve():
        out.append(f"prepare.py --eval: checkpoint is {result['checkpoint']!r}, not the file it scored")
    if not (ws / str(result["script"])).resolve() == (ws / "train.py").resolve():
        out.append(f"prepare.py --eval: script is {result['script']!r}, not the checkpoint's script (train.py)")
    if type(result["seconds"]) not in (int, float) or not 0 <= result["seconds"] <= wall:
        out.append(f"prepare.py --eval: seconds must be the evaluation's duration, is {result['seconds']!r}")
    return out


def bad_input_problems(
    case: str, proc: subprocess.CompletedProcess, bad: Bad, task_id: str, code_ran: bool
) -> list[str]:
    """The broken promises of the answer to one bad input.

    The answer must be exit 1, one JSON line with an error naming what is wrong, no value, no
    traceback.
    """
    where = f"prepare.py --eval, bad input {case}"
    out = []
    if code_ran:
        out.append(f"{where}: loading the checkpoint ran code from its pickle: torch.load(..., weights_only=True)")
    if "Traceback" in proc.stderr:
        last = proc.stderr.strip().splitlines()[-1][:200]
        out.append(f"{where}: a bare traceback ({last}): catch the error and print one JSON line with 'error'")
    result, wrong = one_json_line(proc.stdout)
    if wrong:
        return [*out, f"{where}: {wrong}"]
    if proc.returncode != 1:
        out.append(f"{where}: exit status {proc.returncode}, must be 1")
    if "value" in result:
        out.append(f"{where}: printed a value ({result['value']!r}): a bad input gets an error and no score")
    if result.get("task") != task_id:
        out.append(f"{where}: the error line's task is {result.get('task')!r}, not {task_id!r}")
    error = result.get("error")
    if not isinstance(error, str) or not error.strip():
        return [*out, f"{where}: the JSON line needs an 'error' saying what to fix"]
    out += [f"{where}: the error should name {text!r}: {error[:200]!r}" for text in bad.mention if text not in error]
    out += [f"{where}: the error should not say {text!r}: {error[:200]!r}" for text in bad.avoid if text in error]
    return out


def help_problems(proc: subprocess.CompletedProcess) -> list[str]:
    """The problems of ``prepare.py --help``: a failure, or an option it does not document."""
    if proc.returncode != 0:
        return [f"prepare.py --help exited {proc.returncode}"]
    return [f"prepare.py --help does not document {option}" for option in HELP_OPTIONS if option not in proc.stdout]


def source_problems(train_source: str) -> list[str]:
    """No false positive of the rules the audit reads from code: agents copy the baseline train.py.

    The rules are 2 (pretrained weights), 3 (internet) and 4 (installs).
    """
    from bench.rules.conduct import FETCH, INSTALL, PRETRAINED, PYTHON_FETCH

    out = []
    for pattern in (PRETRAINED, PYTHON_FETCH, FETCH, INSTALL):
        for line in train_source.splitlines():
            if pattern.search(line) and not line.lstrip().startswith("#"):
                out.append(
                    "train.py asks for what the audit forbids (rules 2-4; every agent copying it is flagged): "
                    f"{line.strip()[:120]!r}"
                )
    return out


def held_out_problems(
    toml: dict, val_split: str, prepared: set[str], in_workspace: dict | None, shipped: tuple[str, ...] = ()
) -> list[str]:
    """The eval split's labels stay out of every workspace (rule 9).

    ``prepared``: the files --prepare wrote; ``in_workspace``: the JSON of `prepare.py --eval` run
    inside a real workspace (None: it printed no JSON); ``shipped``: the task folder's own files
    (relative paths), where a held-out file must not be: an installed pack's folder lies in
    site-packages, which every agent's sandbox reads.
    """
    split, held = toml.get("eval_split"), list(toml.get("held_out", []))
    out = [
        f"task.toml: held_out names {n!r}, which prepare.py --prepare does not write" for n in held if n not in prepared
    ]
    out += [
        f"the task folder ships {f!r}, a held_out file: whoever reads the folder has the labels (an installed pack "
        "is in every agent's sandbox, read-only): let prepare.py --prepare write it from [[data]] instead"
        for f in shipped
        if Path(f).name in {Path(n).name for n in held}
    ]
    if split == val_split:
        return out  # scored on the validation split, which agents have
    if not held:
        out.append(
            f"task.toml: eval_split is {split!r}, not the validation split {val_split!r}, and held_out is empty: "
            f"list the prepared-data files holding the {split} labels in held_out, or every agent's workspace gets them"
        )
    if in_workspace and "value" in in_workspace and in_workspace.get("split") == split:
        out.append(
            f"an agent's workspace can score the {split} split (prepare.py --eval there printed {split} "
            f"{in_workspace.get('value')!r}): add every prepared file that holds {split} labels to held_out"
        )
    return out


def scorer_problems(official: dict, eval_value: float | None, toml: dict, reported_val: float) -> list[str]:
    """The harness's trusted scorer on the baseline.

    Labels on its side, the model in a sandboxed predictor.
    """
    from bench.rules.scoring import VAL_ABS_TOL, VAL_REL_TOL

    if official.get("error") or official.get("value") is None:
        return [
            f"the trusted scorer gave no score: {official.get('error')} (see the scorer's feed: eval_batches, score)"
        ]
    out = []
    for key, declared in (("task", "id"), ("metric", "metric"), ("direction", "direction"), ("split", "eval_split")):
        if official.get(key) != toml.get(declared):
            out.append(f"the scorer's {key} is {official.get(key)!r}, task.toml's {declared} is {toml.get(declared)!r}")
    if eval_value is not None and not close(official["value"], eval_value, abs_tol=1e-12):
        out.append(
            f"the scorer's {toml.get('metric')} {official['value']!r} differs from prepare.py --eval's {eval_value!r}: "
            "eval_batches and score must give what --eval computes, on the same split"
        )
    checks = set(official.get("checks") or [])
    if not PROBES_ALWAYS <= checks or not checks <= PROBES_ALL:
        out.append(f"the scorer's probes ran {sorted(checks)}, expected at least {sorted(PROBES_ALWAYS)}")
    val = official.get("val_value")
    if not isinstance(val, (int, float)):
        out.append("the scorer gave no validation score (val_value): the scorer must be able to feed the val split")
    elif abs(reported_val - val) > max(VAL_ABS_TOL, VAL_REL_TOL * abs(val)):
        out.append(
            f"the baseline's self-reported val_score {reported_val!r} disagrees with the harness's validation score "
            f"{val!r} (rule 9 flags every run): report the evaluator's own score on the validation split"
        )
    return out
