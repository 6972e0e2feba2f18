"""The steps of one agent run, in pipeline order (``bench.runner.run`` calls them in turn).

The paper's §3.3 describes five harness steps (Figure 2); the pipeline names each action after what
it does, and adds the rule audit of §3.4 and the recording (the paper's step in brackets):

    workspace.py       1. a fresh run directory: task files (locked read-only), data, weights  [1]
    launch.py          2. the agent process with the standard prompt; its output parsed live  [2, 3]
    watch.py           3. the wall-clock budget: SIGTERM at the budget, SIGKILL after grace   [4]
    launch_monitor.py     beside 3: an independent count of the scripts the agent's tree runs
    arrivals.py           beside 3: when each checkpoint's content appeared (stat + sha256)
    collect.py         4. scored checkpoints -> best by self-reported validation + windows'   [5]
    evaluate.py        5. the ORIGINAL prepare.py scores the candidates, outside the workspace [5]
    audit.py           6. the paper's rules checked from evidence the agent could not write   [§3.4]
    record.py          7. result.json, then the MLflow agent run with its script and eval runs

Each step after the launch takes one typed input (``collect.CollectInput``,
``evaluate.EvaluationInput``, ``audit.AuditInput``; the scorer's ``bench.scoring.job.ScoringJob``),
built by ``bench.runner.Run``.
"""
