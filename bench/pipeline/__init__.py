"""The steps of one agent run, in pipeline order.

``bench.runner.run`` calls them one after the other.

The paper's §3.3 describes five harness steps (Figure 2); the pipeline names each action after what
it does, and adds the rule audit of §3.4 and the recording:

    workspace.py       1. a fresh run directory: task files (locked ones read-only), data, weights
    (paper 1) launch.py          2. the agent process with the standard prompt; its output parsed
    live           (paper 2, 3) watch.py           3. the wall-clock budget: SIGTERM at the budget,
    SIGKILL after the grace        (paper 4) launch_monitor.py     beside 3: an independent count of
    the scripts the agent's process tree runs arrivals.py           beside 3: when each checkpoint's
    content appeared (stat + sha256), as the harness saw it collect.py         4. scored checkpoints
    -> the best by self-reported validation + each window's  (paper 5) evaluate.py        5. the
    ORIGINAL prepare.py scores the candidates, outside the workspace         (paper 5) audit.py
    6. the paper's rules checked from evidence the agent could not write           (paper §3.4)
    record.py          7. result.json, then the MLflow agent run with its script and eval runs
"""
