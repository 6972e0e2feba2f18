"""The steps of one agent run, in the order of the paper's Figure 2 (``bench.runner.run`` calls them):

workspace.py       1. a fresh run directory: task files (locked ones read-only), prepared data, weights
launch.py          2. the agent process: its command, environment and prompt; its output parsed live
watch.py           3. the wall-clock budget: SIGTERM at the budget, SIGKILL after the grace period
launch_monitor.py     (beside 3) an independent count of the scripts the agent's process tree runs
collect.py         4. scored checkpoints -> the best by self-reported validation + the best of each window
evaluate.py        5. the ORIGINAL prepare.py scores the candidates, outside the workspace
audit.py           6. the paper's rules checked from evidence the agent could not write
record.py          7. result.json, then the MLflow agent run with its script and eval runs
"""
