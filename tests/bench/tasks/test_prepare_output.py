"""What `bench tasks prepare` prints names folders that exist: prepare.py writes into a temporary folder that is
renamed when the build succeeds, and its "prepared ... in DIR" line names the final folder, not the deleted one."""

from __future__ import annotations

import re

import pytest


@pytest.mark.fresh_data  # it watches T6's data being prepared
def test_the_prepared_line_names_the_final_folder(generated_t6, capfd):
    from bench.tasks import data

    final = data.prepare(generated_t6, progress=False)
    out = capfd.readouterr().out
    said = re.findall(r"^prepared .* in (\S+)$", out, flags=re.M)
    assert said == [str(final)], out  # T6's prepare.py prints one such line
    assert ".tmp" not in out and final.is_dir()
