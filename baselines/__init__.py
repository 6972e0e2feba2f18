"""Optuna-tuned reference baselines (the calibration row): search spaces, the ``optuna`` agent's driver,
``bench baselines tune`` and the committed results in ``baselines/results/<task>.json``.

    spaces.py   one define-by-run search space per task over the baseline's knobs
    rewrite.py  run_<k>.py = train.py with only CONFIG changed
    agent.py    the optuna agent's driver (``python -m baselines.agent``), run by the harness in a workspace
    tune.py     tuning outside a campaign through bench.runner, and the results files
    cli.py      ``bench baselines tune|show|optuna-dashboard``
"""
