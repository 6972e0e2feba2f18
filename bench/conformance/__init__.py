"""The conformance check of a task folder (``bench tasks check DIR``).

Every promise a task makes to the harness, checked on the small generated data the folder provides
(its ``smalldata.py``).

``cases.py``: the bad inputs every ``prepare.py --eval`` must answer with one JSON error line;
``promises.py``: the judgements (checkpoint payload, the ``--eval`` line, bad-input answers,
held-out split, scorer), each a list of lines saying what to change; ``check.py``: the command,
which prepares, trains, evaluates and scores as the harness does; ``forked_cli.py``: many ``python
prepare.py ARGS`` at the cost of one interpreter start-up. The test suite
(tests/tasks/test_conformance.py) uses the same cases and judgements on its session-wide trained
baselines.
"""
