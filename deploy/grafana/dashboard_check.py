#!/usr/bin/python3
"""Checks of the Grafana dashboard (parameter_server.json), and its PromQL expressions for reuse.

    dashboard_check.py [DASHBOARD.json]            every check; exit 1 naming the first problem
    dashboard_check.py [DASHBOARD.json] --exprs    every panel's expression, one a line, with the
                                                   dashboard's variables replaced so that
                                                   Prometheus itself can run them ($job: .*,
                                                   $__rate_interval: 1m, $__range: 1h)

From Python (a test that runs the expressions against a real Prometheus):

    import dashboard_check
    for panel, ref_id, expr in dashboard_check.expressions("deploy/grafana/parameter_server.json"):
        ...   # expr with the variables replaced; substitute=False keeps them

What is checked: the file is JSON, a dashboard of schemaVersion 36 or later with a title and uid;
every panel has a title and a unique id, and a place on the 24-column grid that overlaps no other;
every panel but a row has a datasource (the `datasource` variable) and at least one target, each
with a refId and a non-empty expr; every `$variable` an expression uses is the dashboard's or
Grafana's own; and every metric an expression names is one the daemons export (METRICS below,
the names of the metrics endpoint, issue 15): a counter only inside rate() or increase(), a
histogram only as its _bucket series inside histogram_quantile() grouped by `le`, or as its
_sum/_count inside rate(); a gauge never inside rate(); every label an expression matches or groups
by is one of its metrics' labels (or Prometheus's own job and instance).
"""

import argparse
import json
import os
import re
import sys

# The metrics the daemons export: name -> (type, labels). Every series also has job and instance.
METRICS = {
    # Servers.
    "ps_server_rpcs_total": ("counter", {"method", "code"}),
    "ps_server_rpc_duration_seconds": ("histogram", {"method"}),
    "ps_server_keys_pulled_total": ("counter", {"table"}),
    "ps_server_keys_pushed_total": ("counter", {"table"}),
    "ps_server_rows": ("gauge", {"table"}),
    "ps_server_rows_evicted_total": ("counter", {"table", "reason"}),
    "ps_server_admission_refused_total": ("counter", {"table"}),
    "ps_server_rows_refused_at_cap_total": ("counter", {"table"}),
    "ps_server_max_rows_per_copy": ("gauge", {"table"}),
    "ps_server_memory_budget_bytes": ("gauge", set()),
    "ps_server_memory_allowance_bytes": ("gauge", set()),
    "ps_server_resident_bytes": ("gauge", set()),
    "ps_server_peak_resident_bytes": ("gauge", set()),
    "ps_server_tier_rows": ("gauge", {"table"}),
    "ps_server_tier_bytes": ("gauge", {"table"}),
    "ps_server_rows_demoted_total": ("counter", {"table"}),
    "ps_server_rows_promoted_total": ("counter", {"table"}),
    "ps_server_tier_disk_bytes": ("gauge", set()),
    "ps_server_tier_max_disk_bytes": ("gauge", set()),
    "ps_server_tier_refused_rows_total": ("counter", set()),
    "ps_server_memory_bytes": ("gauge", {"table"}),
    "ps_server_late_pushes_dropped_total": ("counter", set()),
    "ps_server_late_keys_dropped_total": ("counter", set()),
    "ps_server_pull_staleness_mean_steps": ("gauge", set()),
    "ps_server_pull_staleness_max_steps": ("gauge", set()),
    "ps_server_applied_step": ("gauge", set()),
    "ps_server_primary_shards": ("gauge", set()),
    "ps_server_replica_shards": ("gauge", set()),
    "ps_server_replica_lag_records": ("gauge", {"shard", "replica"}),
    "ps_server_replica_lag_bytes": ("gauge", {"shard", "replica"}),
    "ps_server_replica_lag_seconds": ("gauge", {"shard", "replica"}),
    "ps_server_checkpoint_duration_seconds": ("histogram", set()),
    # Workers.
    "ps_worker_step": ("gauge", {"rank"}),
    "ps_worker_samples_per_second": ("gauge", {"rank"}),
    "ps_worker_loss": ("gauge", {"rank"}),
    "ps_worker_auc": ("gauge", {"rank"}),
    "ps_worker_samples_total": ("counter", {"rank"}),
    "ps_worker_pull_duration_seconds": ("histogram", {"rank"}),
    "ps_worker_push_duration_seconds": ("histogram", {"rank"}),
    "ps_worker_allreduce_duration_seconds": ("histogram", {"rank"}),
    "ps_worker_step_seconds_total": ("counter", {"rank", "part"}),
    # Coordinator.
    "ps_coordinator_members": ("gauge", {"role", "state"}),
    "ps_coordinator_shard_map_version": ("gauge", set()),
    "ps_coordinator_lost_shards": ("gauge", set()),
    "ps_coordinator_failovers_total": ("counter", set()),
    "ps_coordinator_checkpoints_total": ("counter", {"outcome"}),
    "ps_coordinator_checkpoint_duration_seconds": ("histogram", set()),
}
SCRAPE_LABELS = {"job", "instance"}
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
# Grafana's own variables, and what --exprs puts in their place.
BUILTIN_VARIABLES = {"__rate_interval": "1m", "__interval": "30s", "__range": "1h"}
# What --exprs puts in place of the dashboard's own variables: every value.
VARIABLE_VALUES = {"job": ".*", "datasource": ""}

DEFAULT_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "parameter_server.json")

_NAME = re.compile(r"\bps_[a-z0-9_]+")
_VARIABLE = re.compile(r"\$(?:\{(\w+)(?::\w+)?\}|(\w+))")
_GROUPING = re.compile(r"\b(?:by|without)\s*\(([^)]*)\)")


class DashboardError(Exception):
    pass


def load(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except ValueError as e:
        raise DashboardError("%s: not JSON: %s" % (path, e))


def panels(dashboard):
    """Every panel, those inside collapsed rows included."""
    for panel in dashboard.get("panels", []):
        yield panel
        for inner in panel.get("panels", []) or []:
            yield inner


def expressions(path=DEFAULT_PATH, substitute=True):
    """[(panel title, refId, expr)] of every target, the variables replaced when substitute."""
    out = []
    for panel in panels(load(path)):
        for target in panel.get("targets", []) or []:
            expr = target.get("expr", "")
            out.append((panel.get("title", ""), target.get("refId", ""),
                        substitute_variables(expr) if substitute else expr))
    return out


def substitute_variables(expr):
    def value(m):
        name = m.group(1) or m.group(2)
        if name in BUILTIN_VARIABLES:
            return BUILTIN_VARIABLES[name]
        if name in VARIABLE_VALUES:
            return VARIABLE_VALUES[name]
        raise DashboardError("no value for $%s in %s" % (name, expr))
    return _VARIABLE.sub(value, expr)


def metric_of(name):
    """(metric, type, suffix) of a series name; raises DashboardError for an unknown one."""
    if name in METRICS:
        return name, METRICS[name][0], ""
    for suffix in HISTOGRAM_SUFFIXES:
        base = name[:-len(suffix)]
        if name.endswith(suffix) and METRICS.get(base, ("",))[0] == "histogram":
            return base, "histogram", suffix
    raise DashboardError("unknown metric %s (not one the daemons export)" % name)


def _enclosing_calls(expr, pos):
    """The names of the function calls whose parentheses enclose expr[pos], innermost first."""
    calls = []
    depth = 0
    for i in range(pos - 1, -1, -1):
        c = expr[i]
        if c == ")":
            depth += 1
        elif c == "(":
            if depth == 0:
                m = re.search(r"([A-Za-z_]+)\s*$", expr[:i])
                calls.append(m.group(1) if m else "")
            else:
                depth -= 1
    return calls


def _selector_after(expr, end):
    """The label matchers {...} right after a series name, and whether a [range] follows."""
    rest = expr[end:]
    labels = set()
    m = re.match(r"\s*\{([^}]*)\}", rest)
    if m:
        labels = set(re.findall(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)", m.group(1)))
        rest = rest[m.end():]
    return labels, bool(re.match(r"\s*\[", rest))


def check_expr(expr, variables):
    """Raises DashboardError for the first problem of one expression; returns its metrics."""
    if not expr.strip():
        raise DashboardError("an empty expr")
    for m in _VARIABLE.finditer(expr):
        name = m.group(1) or m.group(2)
        if name not in variables and name not in BUILTIN_VARIABLES:
            raise DashboardError("$%s is not a variable of the dashboard" % name)
    used = set()
    labels_in_expr = set(SCRAPE_LABELS)
    for m in _NAME.finditer(expr):
        name = m.group(0)
        metric, kind, suffix = metric_of(name)
        used.add(name)
        own = METRICS[metric][1] | SCRAPE_LABELS | ({"le"} if suffix == "_bucket" else set())
        labels_in_expr |= own
        matched, has_range = _selector_after(expr, m.end())
        unknown = matched - own
        if unknown:
            raise DashboardError("%s has no label %s" % (name, ", ".join(sorted(unknown))))
        calls = _enclosing_calls(expr, m.start())
        rated = has_range and calls and calls[0] in ("rate", "increase", "irate")
        if kind == "counter" and not rated:
            raise DashboardError("counter %s outside rate() or increase()" % name)
        if kind == "gauge" and has_range and calls and calls[0] in ("rate", "increase", "irate"):
            raise DashboardError("gauge %s inside %s()" % (name, calls[0]))
        if kind == "histogram":
            if not suffix:
                raise DashboardError("histogram %s without _bucket, _sum or _count" % name)
            if not rated:
                raise DashboardError("histogram series %s outside rate() or increase()" % name)
            if suffix == "_bucket":
                if "histogram_quantile" not in calls:
                    raise DashboardError("%s outside histogram_quantile()" % name)
                grouping = _GROUPING.findall(expr)
                if not any("le" in [g.strip() for g in group.split(",")] for group in grouping):
                    raise DashboardError("%s not grouped by le" % name)
    for group in _GROUPING.findall(expr):
        for label in (g.strip() for g in group.split(",")):
            if label and label not in labels_in_expr:
                raise DashboardError("grouping by %s, a label none of %s has"
                                     % (label, ", ".join(sorted(used)) or "its metrics"))
    return used


def check_variable_query(query):
    """A variable's query names only metrics the daemons export."""
    for name in _NAME.findall(query):
        metric_of(name)


def _overlap(a, b):
    return (a["x"] < b["x"] + b["w"] and b["x"] < a["x"] + a["w"] and
            a["y"] < b["y"] + b["h"] and b["y"] < a["y"] + a["h"])


def check_dashboard(path=DEFAULT_PATH):
    """Every check; returns a summary, raises DashboardError naming the first problem."""
    d = load(path)
    if not isinstance(d, dict) or "panels" not in d:
        raise DashboardError("%s: not a Grafana dashboard (no panels)" % path)
    if not isinstance(d.get("schemaVersion"), int) or d["schemaVersion"] < 36:
        raise DashboardError("%s: schemaVersion %r, want 36 or later" % (path, d.get("schemaVersion")))
    for key in ("title", "uid"):
        if not d.get(key):
            raise DashboardError("%s: no %s" % (path, key))
    variables = {}
    for v in d.get("templating", {}).get("list", []):
        variables[v["name"]] = v
        query = v.get("query")
        if isinstance(query, dict):
            query = query.get("query", "")
        if v.get("type") == "query":
            try:
                check_variable_query(query or "")
            except DashboardError as e:
                raise DashboardError("%s: variable $%s: %s" % (path, v["name"], e))
    if variables.get("datasource", {}).get("type") != "datasource":
        raise DashboardError("%s: no datasource variable" % path)
    ids = {}
    places = []
    metrics_used = set()
    count = 0
    for panel in panels(d):
        title = panel.get("title", "")
        where = "%s: panel %r (id %s)" % (path, title, panel.get("id"))
        if not title.strip():
            raise DashboardError("%s: no title" % where)
        if panel.get("id") in ids:
            raise DashboardError("%s: id taken by panel %r" % (where, ids[panel.get("id")]))
        ids[panel.get("id")] = title
        pos = panel.get("gridPos") or {}
        if not all(isinstance(pos.get(k), int) for k in ("x", "y", "w", "h")) or \
                pos["x"] < 0 or pos["w"] < 1 or pos["x"] + pos["w"] > 24 or pos["h"] < 1:
            raise DashboardError("%s: gridPos %r is not on the 24-column grid" % (where, pos))
        for other_title, other in places:
            if _overlap(pos, other):
                raise DashboardError("%s: overlaps panel %r" % (where, other_title))
        places.append((title, pos))
        if panel.get("type") == "row":
            continue
        count += 1
        ds = panel.get("datasource")
        uid = ds.get("uid") if isinstance(ds, dict) else ds
        if uid not in ("${datasource}", "$datasource"):
            raise DashboardError("%s: datasource %r, want the $datasource variable" % (where, ds))
        targets = panel.get("targets") or []
        if not targets:
            raise DashboardError("%s: no targets" % where)
        refs = set()
        for t in targets:
            if not t.get("refId") or t["refId"] in refs:
                raise DashboardError("%s: a target without a refId of its own" % where)
            refs.add(t["refId"])
            try:
                metrics_used |= check_expr(t.get("expr", ""), variables)
            except DashboardError as e:
                raise DashboardError("%s, target %s: %s: %s" % (where, t["refId"], e, t.get("expr", "")))
    return "%d panels, %d rows, %d expressions, %d of %d metrics used" % (
        count, len(ids) - count, len(expressions(path)),
        len({metric_of(n)[0] for n in metrics_used}), len(METRICS))


def main():
    parser = argparse.ArgumentParser(prog="dashboard_check.py")
    parser.add_argument("dashboard", nargs="?", default=DEFAULT_PATH)
    parser.add_argument("--exprs", action="store_true",
                        help="print every expression, the variables replaced, one a line")
    args = parser.parse_args()
    try:
        if args.exprs:
            for _, _, expr in expressions(args.dashboard):
                print(expr)
        else:
            print("ok: %s: %s" % (args.dashboard, check_dashboard(args.dashboard)))
    except (DashboardError, OSError) as e:
        print("FAIL: %s" % e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
