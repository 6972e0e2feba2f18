"""Publishing and checking a campaign.

One bundle archive, its export and import, and ``bench verify``.

Everything a stranger's bundle reaches is in this package, so that its reading side can be read in
one place:

* :mod:`bench.bundle.archive`: the format (manifest, per-file sha256), the bounded unpacking and
  the check;
* :mod:`bench.bundle.containment`: the one rule for every path an import or export touches;
* :mod:`bench.bundle.export` (``bench export``) and :mod:`bench.bundle.importer` (``bench import``);
* :mod:`bench.bundle.verify` (one run re-scored and re-audited),
  :mod:`bench.bundle.verify_store` (its MLflow record), :mod:`bench.bundle.verify_cli`
  (``bench verify``: targets, table, what it proved);
* :mod:`bench.bundle.cli`: the ``export``/``import`` command line.
"""
