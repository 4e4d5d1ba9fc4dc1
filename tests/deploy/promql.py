"""What the dashboard and alert tests need to read PromQL: Herald's series and the names an
expression selects (no PromQL parser is shipped for Python; promtool checks the syntax)."""

from __future__ import annotations

import re

from prometheus_client.metrics import MetricWrapperBase

import herald.adapters.fleet_gauges
import herald.observability

METRIC_MODULES = (herald.observability, herald.adapters.fleet_gauges)


def series_names() -> dict[str, str]:
    """Every series name Herald exports -> ``counter`` (counters and histogram series, which
    only make sense under rate/increase) or the metric type."""
    series: dict[str, str] = {}
    for module in METRIC_MODULES:
        for value in vars(module).values():
            if isinstance(value, MetricWrapperBase):
                series.update(_family_series(value))
    return series


def _family_series(metric: MetricWrapperBase) -> dict[str, str]:
    series: dict[str, str] = {}
    for family in metric.describe():
        if family.type == "counter":
            series[f"{family.name}_total"] = "counter"
        elif family.type == "histogram":
            series.update(dict.fromkeys(
                (f"{family.name}{suffix}" for suffix in ("_bucket", "_count", "_sum")), "counter"))
        else:
            series[family.name] = family.type
    return series


PROMQL_FUNCTIONS = frozenset({
    "sum", "min", "max", "avg", "count", "group", "stddev", "stdvar", "topk", "bottomk", "quantile",
    "count_values", "rate", "irate", "increase", "delta", "idelta", "deriv", "histogram_quantile",
    "clamp", "clamp_min", "clamp_max", "abs", "ceil", "floor", "round", "vector", "scalar", "time",
    "label_replace", "label_join", "sort", "sort_desc", "absent", "absent_over_time", "changes",
    "resets", "avg_over_time", "max_over_time", "min_over_time", "sum_over_time", "count_over_time",
    "last_over_time", "quantile_over_time", "predict_linear", "timestamp", "sqrt", "exp", "ln"})
PROMQL_KEYWORDS = frozenset({"and", "or", "unless", "bool", "offset"})
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_GROUPING = re.compile(
    r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)|\b(?:group_left|group_right)\b")
_TOKEN = re.compile(r"\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|[A-Za-z_:][\w:]*")


def metric_names(expr: str) -> list[str]:
    """Series names an expression selects; fails on any name PromQL does not know as a function."""
    bare = _GROUPING.sub(" ", re.sub(r"\{[^}]*\}|\[[^\]]*\]", " ", _STRING.sub('""', expr)))
    names = []
    for match in _TOKEN.finditer(bare):
        token = match.group()
        if token[0].isdigit() or token in PROMQL_KEYWORDS:
            continue
        if bare[match.end():].lstrip().startswith("("):
            assert token in PROMQL_FUNCTIONS, f"unknown PromQL function {token} in {expr}"
        else:
            names.append(token)
    return names
