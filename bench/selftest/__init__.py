"""The GPU proof kit.

``bench selftest`` (``make gpu-proof``) proves the toolkit on the card it exists for.

One command measures, in one call, what only a GPU can show and writes ``selftest.json`` +
``selftest.md``: CUDA inside the agent's sandbox; T6's baseline under the full protocol (score, wall
time); T1's steps per second bare vs inside ``bench run`` (the harness's and tracer's cost, as a
ratio); the official evaluation (sandboxed predictor on the device) vs in-process; the run's NVML
metrics; no GPU process left at the end.

On your own GPU box (the toolkit installed beside your PyTorch, data downloadable or in
``BENCH_DATA_MIRROR``)::

    make gpu-proof                 # = bench selftest --device cuda --out selftest-report
    bench selftest --device cpu    # the kit on a CPU, small budgets: a test of the kit (CI runs it)

On a lent machine (PyTorch preinstalled, no package index, at most 64 MiB carried, one call of <= 8
minutes):

1. here, once: ``make gpu-proof-bundle`` writes ``.gpu-proof/`` (git-ignored): the wheels the kit
   needs that the machine's image lacks (cp312, manylinux x86_64), the raw data of T6 and T1,
   ``run.sh``; it prints its size.
2. carry it and run one command (the device tool: ``carry=[".gpu-proof"]``, ``timeout_s`` 480)::

       sh .gpu-proof/run.sh --out "$OUT"

   ``run.sh`` installs the wheels and the checkout (editable, no index) into the Python that holds
   torch, points ``BENCH_DATA_MIRROR`` at the carried data and runs
   ``bench selftest --device cuda``.
3. the report comes back under ``$OUT``; put its figures, with the card's name, in the README.

Modules: ``kit.py`` (the order, the checks, the exit code), ``measure.py`` (each measurement),
``report.py`` (JSON + Markdown), ``bundle.py`` (the carry bundle).
"""
