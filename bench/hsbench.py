"""Helpers shared by the serving benchmark reports (standard library only)."""
import csv
import json


def load_json(path):
    """A hetbench --json summary, or None when missing or unreadable."""
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def csv_rows(path):
    """Rows of a hetbench --csv file (summary comment left out), values parsed to float where
    they are numbers; [] when the file is missing."""
    out = []
    try:
        with open(path) as f:
            lines = [l for l in f if not l.startswith("#")]
    except OSError:
        return out
    for r in csv.DictReader(lines):
        d = {}
        for k, v in r.items():
            try:
                d[k] = float(v)
            except (TypeError, ValueError):
                d[k] = v if v != "" else None
        out.append(d)
    return out


def measured(rows):
    """Rows sent after the warm-up."""
    return [r for r in rows if r.get("warmup") != 1.0]


def ok(rows):
    """Measured rows answered 2xx."""
    return [r for r in measured(rows) if isinstance(r.get("status"), float) and 200 <= r["status"] < 300]


def pct(xs, p):
    """Percentile p (0-100) with linear interpolation; NaN when xs is empty."""
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * p / 100.0
    i = int(k)
    j = min(i + 1, len(xs) - 1)
    return xs[i] + (xs[j] - xs[i]) * (k - i)


def fmt(x, spec="%.1f"):
    return "-" if x is None or x != x else spec % x
