"""Optuna-tuned reference baselines (the calibration row): search spaces, the ``optuna`` agent's driver,
``bench baselines tune`` and the committed results in ``baselines/results/<task>.json``.

    spaces.py           one define-by-run search space per task over the baseline's knobs
    rewrite.py          run_<k>.py = train.py with only CONFIG changed
    agent.py            the optuna agent (``python -m baselines.agent``), run by the harness in a workspace: options,
                        the study and its storage, then the driver's search and the final summary
    driver.py           the search: propose a config that fits the time left, run it, tell the study
    trial_workspace.py  TrialWorkspace: the agent's view of its workspace (train.py, prepare.py, .bench/ paths)
    trial_process.py    one trial script as a process: its environment and token, ended by bench.processes.end_tree
    spool.py            a trial's trace: its validation scores (log_metrics events), and the marks at its end
    pruning.py          GridReporter: validation scores -> the pruner, on a common grid of epochs
    timing.py           TrialRecord, the measured speed of trials, TimeKeeper (the time-left stop rule)
    summary.py          the study's summary in .bench/artifacts/ (study.json, trials.csv, importances, plots)
    tune.py             tuning outside a campaign through bench.runner, and the results files
    cli.py              ``bench baselines tune|show|optuna-dashboard``
"""
