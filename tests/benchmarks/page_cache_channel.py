"""Benchmark: the page-cache channel of issue 38, each receiver against each sandbox (prints figures; not a test).

    python tests/benchmarks/page_cache_channel.py [--rows 48] [--repeats 3] [--smoke]

A scored predictor's sandbox (the scorer's own, :func:`bench.scoring.scorer.sandbox_wrap`) loads the pages of a cold
shared file on disk that encode T6-shaped rows; a receiver in the prober's sandbox and one in an agent's sandbox ask
every page, with ``RWF_NOWAIT`` and by timing a plain first touch (tests/bench/sandbox/page_cache_channel.py), each
with the seccomp filter (now) and without it (before issue 38), and with the predictors' page cache dropped after the
sender ended (:meth:`bench.sandbox.resource_limits.RunGroup.drop_page_cache`, what the scorer does before its prober
runs agent code; an agent of another run that reads while the sender runs is the row without it). Each figure
``page_cache_channel.<receiver>.<sandbox>.filter_on|filter_off[.dropped]``: the median of the repeats of rows
received bit for bit, of those sent (each repeat's count in its description). ``make bench`` runs the defaults (48
rows, 3 repeats: 2 min 6 s on the shared 2-core machine at load 5-6). ``--smoke``: 4 rows, one repeat (its figures
mean nothing).
Timing depends on the machine and its load: this is a measurement, never a test.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.sandbox import Policy, Sandbox, default_hidden, default_readable  # noqa: E402
from bench.sandbox.resource_limits import Limits, RunGroup  # noqa: E402
from bench.scoring.scorer import sandbox_wrap  # noqa: E402
from tests.bench.sandbox import page_cache_channel as ch  # noqa: E402
from tests.benchmarks.figures import Span, add_smoke  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=3)
    add_smoke(parser)
    args = parser.parse_args()
    if args.smoke:
        args.rows, args.repeats = 4, 1
    with tempfile.TemporaryDirectory(prefix="page-cache-", dir="/var/tmp") as tmp:
        eval_dir, ws = Path(tmp, "eval"), Path(tmp, "ws")
        eval_dir.mkdir()
        ws.mkdir()
        scored, prober = sandbox_wrap(eval_dir), sandbox_wrap(eval_dir)
        agent = Sandbox(
            Policy(cwd=ws, writable=(ws,), readable=(*default_readable(), eval_dir), hidden=default_hidden()),
            limits=RunGroup(Limits()),
        )
        sent = ch.rows(args.rows)
        bits = ch.to_bits(sent)
        path = ch.shared_file(eval_dir / "shared.bin", len(bits))
        print(f"{args.rows} rows, {len(bits)} bits, {ch.SLOT * 4} KiB a bit; cold before each send: "
              f"{ch.cached_fraction(path):.3f} cached")  # fmt: skip
        print(f"{'receiver':8} {'sandbox':8} {'filter':7} {'dropped':8} rows received (of {args.rows}), each repeat")
        for how in ("nowait", "timing"):
            for name, box, cwd in (("prober", prober, eval_dir), ("agent", agent, ws)):
                for filtered, drop in ((True, False), (False, False), (True, True)):
                    receiver = box if filtered else Sandbox(replace(box.policy, seccomp=None))
                    got_rows, span = [], Span()
                    for _ in range(args.repeats):
                        ch.evict(path)
                        ch.send(scored.wrap, eval_dir, path, bits)
                        if drop:  # what the scorer does once the scored predictor has ended
                            assert scored.limits.drop_page_cache() is None
                        got = ch.receive(receiver.wrap, cwd, path, len(bits), how)
                        got_rows.append(ch.rows_received(sent, got))
                    if not filtered:
                        receiver.close()
                    label, dropped = "on" if filtered else "off", "yes" if drop else "no"
                    print(f"{how:8} {name:8} {label:7} {dropped:8} {got_rows} (median {statistics.median(got_rows):g})")
                    fid = f"page_cache_channel.{how}.{name}.filter_{label}" + (".dropped" if drop else "")
                    what = (f"{'RWF_NOWAIT' if how == 'nowait' else 'first-touch timing'} receiver in the {name}'s "
                            f"sandbox, seccomp filter {label}, the predictors' pages {'dropped' if drop else 'kept'}; "
                            f"median of {args.repeats}, each: {', '.join(map(str, got_rows))}")  # fmt: skip
                    span.figure(fid, f"{statistics.median(got_rows):g} of {args.rows}", what)
        for box in (scored, prober, agent):
            box.close()
            box.limits.remove()


if __name__ == "__main__":
    main()
