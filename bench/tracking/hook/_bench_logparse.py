"""Step metrics from printed lines, for the output tee (``_bench_tee.py``) of the script tracer.

``step 100 | loss 1.23``, ``Epoch 3/10 - loss: 0.12``, ``iter: 5 lr=3e-4`` ... -> ``(step, {metric:
value})``. Standard library only; ``re`` is imported on the first line that may hold metrics, so a
script that prints nothing metric-like never pays for compiling the expressions.
"""

MAX_PARSE = 4096  # longer lines are not parsed

_rx = None  # (marker, pair, ansi) regular expressions, compiled on first use


def _regexes():
    global _rx
    if _rx is None:
        import re

        num = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
        marker = re.compile(  # step 100 / Step [100/600] / iter: 5 / epoch 3/10 / it #7
            r"(?<![\w./-])(step|iteration|iter|it|epoch)\s*(?:[:=#]\s*)?(\[\s*)?(\d+)(?:\s*/\s*\d+)?(?(2)\s*\])"
            r"(?!\w|\.\d)",
            re.IGNORECASE | re.ASCII,
        )
        pair = re.compile(  # key value / key: value / key=value, optional unit; nothing glued to a path or word
            r"(?<![\w./-])([A-Za-z_](?:[\w./]*\w)?)(?:\s*[:=]\s*|\s+)(" + num + r")(?:ms|s|%)?"
            r"(?=$|[\s|;)\]}]|,(?!\d)|\.(?:\s|$))",
            re.ASCII,
        )
        ansi = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])")
        _rx = (marker, pair, ansi)
    return _rx


def clean(text):
    """A line as a person reads it: without ANSI colour and cursor escapes."""
    return _regexes()[2].sub("", text) if "\x1b" in text else text


def parse_line(text):
    """``(step, {metric: value})`` from one printed line, or None.

    A line counts only with a step marker (step/iter/iteration/it N) or an epoch marker (epoch N,
    epoch N/M); the step is the step number, else the epoch number, and ``epoch`` becomes a metric.
    Values are finite ints or floats (scientific notation too), a unit ms/s/% is dropped.
    """
    if len(text) > MAX_PARSE:
        return None
    low = text.lower()
    if "it" not in low and "step" not in low and "epoch" not in low:  # cheap test before any regex
        return None
    marker, pair, _ = _regexes()
    step = epoch = None
    parts, start = [], 0
    for m in marker.finditer(text):
        if m.group(1).lower() == "epoch":
            epoch = int(m.group(3)) if epoch is None else epoch
        elif step is None:
            step = int(m.group(3))
        parts.append(text[start : m.start()])
        start = m.end()
    if step is None and epoch is None:
        return None
    parts.append(text[start:])
    metrics = {}
    for key, value in pair.findall(" | ".join(parts)):
        x = float(value)
        if x - x == 0.0:  # finite: inf - inf and nan - nan are nan
            metrics[key] = x
    if not metrics:
        return None
    if epoch is not None:
        metrics["epoch"] = float(epoch)
    step = step if step is not None else epoch
    return (step, metrics) if step < 1 << 63 else None
