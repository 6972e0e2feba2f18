"""The sandboxed predictor: the only process of the official evaluation that runs the agent's code.

Started by the scorer (:mod:`bench.scoring.scorer`) inside the sandbox, in a staged folder holding
the task's ORIGINAL locked files, the agent's top-level scripts and one checkpoint, and nothing
else: no labels, no data cache, no run directory, nothing writable, no network. It rebuilds the
model exactly as the output contract says (``build_model(config)`` from the named script,
``load_state_dict(strict=True)``), then answers frames: the scorer sends a batch of evaluation
inputs, the predictor returns the task's ``forward(model, inputs)`` for it. It never sees a label
and never learns a score.

Standard library, numpy and torch only (plus the staged task file): it runs as
``python -I predictor.py`` so that nothing of the harness's environment or of the working directory
is imported by accident. The frames travel on duplicates of stdin/stdout made before any agent code
runs; the agent's code then prints to stderr (the log), so nothing it prints can corrupt the pipe.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import traceback

PROTOCOL = 1


def _pipes():
    """Private copies of stdin/stdout for the frames.

    Descriptor 0 becomes /dev/null and descriptor 1 the log (stderr).
    """
    rx = os.fdopen(os.dup(0), "rb", buffering=0)
    tx = os.fdopen(os.dup(1), "wb")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(2, 1)
    return rx, tx


def _import(path: str, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _build(prepare, checkpoint: str, script: str):
    """The model of ``checkpoint``, rebuilt through ``script``'s build_model.

    Loaded with strict=True.
    """
    try:
        payload = prepare.load_checkpoint(checkpoint)  # weights_only=True: a checkpoint cannot run code
    except Exception as e:
        raise ValueError(f"cannot read the checkpoint: {e} (save it with prepare.save_checkpoint())") from e
    if not os.path.isfile(script):
        raise FileNotFoundError(f"the training script {script} the checkpoint names is not in the evaluation folder")
    try:
        build_model = prepare.load_build_model(script)
    except AttributeError as e:
        raise AttributeError(f"{e}") from e
    model = build_model(payload["config"])
    try:
        model.load_state_dict(payload["state_dict"], strict=True)
    except RuntimeError as e:
        hint = ""
        if any(str(k).startswith("_orig_mod.") for k in payload["state_dict"]):
            hint = (
                " The keys start with '_orig_mod.': the model was saved after torch.compile(); "
                "save the original module, save_checkpoint(model._orig_mod, ...)."
            )
        raise ValueError(
            f"the saved state_dict does not fit build_model(config) from {script} under strict=True.{hint} Details: {e}"
        ) from e
    return model


def _deterministic(torch, device: str) -> None:
    """Deterministic kernels on a GPU, so that a cold replay of a batch gives the scored outputs.

    The scored predictor's outputs bit for bit (or within the task's measured epsilon,
    :func:`bench.scoring.scorer.task_tolerance`), not within a flat tolerance a stateful correction
    could hide in: plain float32 (no TF32), no autotuning (cuDNN's benchmark picks kernels by
    timing), ``use_deterministic_algorithms`` (warn_only: an op without a deterministic kernel warns
    in the log instead of failing an honest model; its noise is what the epsilon measures) and
    cuBLAS's fixed workspace (:data:`CUBLAS_WORKSPACE`, set in the environment before CUDA starts).
    On a CPU nothing: its kernels are deterministic already (replays agree bit for bit: the proof
    kit's CPU run), and ``use_deterministic_algorithms`` alone costs ~1.2 s (it imports some 800
    modules), a fifth of a T6 evaluation on a CPU.
    """
    if device != "cuda":
        return
    torch.use_deterministic_algorithms(True, warn_only=True)
    # but no NaN filling of every new tensor (its default under deterministic algorithms costs a
    # write of each allocation): a model that reads memory it never wrote is not deterministic, and
    # its replays say so anyway
    deterministic = getattr(torch.utils, "deterministic", None)
    if deterministic is not None and hasattr(deterministic, "fill_uninitialized_memory"):
        deterministic.fill_uninitialized_memory = False
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


CUBLAS_WORKSPACE = ":4096:8"  # cuBLAS's deterministic setting (CUDA >= 10.2): a fixed workspace per stream


def _feed_batch_size(path: str) -> int:
    """The task's FEED_BATCH_SIZE, read from the staged prepare.py's text without running it.

    The staged file is the original, locked one. The held prober sets its threads before any file of
    the folder runs.
    """
    import re

    try:
        with open(path, encoding="utf-8") as f:
            found = re.search(r"^FEED_BATCH_SIZE\s*=\s*(\d+)", f.read(), re.M)
    except OSError:
        return 0
    return int(found.group(1)) if found else 0


def main() -> int:
    """Rebuild the model, then answer the scorer's frames until it says end."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--script", required=True)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--hold", action="store_true", help="wait for a 'go' frame before running any agent code")
    args = parser.parse_args()
    rx, tx = _pipes()
    folder = os.getcwd()
    os.environ["CUBLAS_WORKSPACE_CONFIG"] = CUBLAS_WORKSPACE
    from bench.scoring import wire  # the repo is readable in the sandbox

    try:
        import numpy as np
        import torch

        _deterministic(torch, args.device)
        if args.device == "cpu" and _feed_batch_size(os.path.join(folder, "prepare.py")) == 1:
            # one sample a round trip (T1, T6): too little work to share between threads, and a
            # thread pool that wakes (or spins) for every tiny op makes each round trip wait for the
            # scheduler on a busy machine
            torch.set_num_threads(1)
    except BaseException as e:  # noqa: BLE001
        traceback.print_exc()
        wire.send_json(tx, {"error": f"{type(e).__name__}: {e}"})
        return 1
    if args.hold and wire.receive(rx).get("op") != "go":
        return 0  # the prober, held until the scored predictor has ended (bench.scoring.scorer): not needed
    try:
        # the agent's own helper modules beside its script, AFTER the imports the predictor
        # relies on
        sys.path.insert(0, folder)
        prepare = _import(os.path.join(folder, "prepare.py"), "prepare")
        model = _build(prepare, args.checkpoint, os.path.join(folder, args.script)).to(args.device).eval()
        n_params = sum(p.numel() for p in model.parameters())
    except BaseException as e:  # noqa: BLE001 - anything the agent's code raises is reported, never re-raised
        traceback.print_exc()
        wire.send_json(tx, {"error": f"{type(e).__name__}: {e}"})
        return 1
    wire.send_json(tx, {"ready": True, "protocol": PROTOCOL, "n_params": n_params})
    while True:
        frame = wire.receive(rx)
        if frame.get("op") == "end":
            return 0
        try:
            inputs = {k: torch.from_numpy(np.array(v)).to(args.device) for k, v in frame.items()}
            with torch.no_grad():
                out = prepare.forward(model, inputs)
            if not isinstance(out, torch.Tensor):
                raise TypeError(f"forward returned {type(out).__name__}, not a tensor")
            out = out.detach().cpu()
            out = out.float() if out.is_floating_point() else out
            sys.stdout.flush()  # what the agent's code printed reaches the log before the answer: close() kills
            wire.send_arrays(tx, {"out": out.numpy()})
        except BaseException as e:  # noqa: BLE001
            traceback.print_exc()
            wire.send_json(tx, {"error": f"{type(e).__name__}: {e}"})
            return 1


if __name__ == "__main__":
    sys.exit(main())
