"""Campaigns: a matrix of agents x tasks x repeats under one budget, from a TOML file.

Each agent comes with its models and options. A campaign is run to its end on this machine's GPUs
or on Slurm, resumable at any point.

``spec`` reads and checks the file and gives every run a stable id (its run directory); ``job`` is
one run as a job (its state from its directory, start / resume / leave, what an infrastructure
failure is); ``retry`` counts those failures against the campaign's retries; ``local`` and ``slurm``
are the executors (a ``bench`` process per run on local GPUs; submitit job arrays); ``view`` is the
live status line and the status table; ``cli`` is ``bench campaign``. Every run goes through
:func:`bench.runner.run` or :func:`bench.resume.resume_run`, as for ``bench run``.
"""
