#!/usr/bin/python3
"""The Grafana dashboard passes dashboard_check.py, and the check refuses what it must.

The second half breaks a copy of the dashboard one way at a time (a metric's name misspelt, a
panel without a target, a counter drawn without rate(), ...) and expects the check to name the
panel and the problem, so that the dashboard's passing means something.
"""

import copy
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
DASHBOARD = os.path.join(HERE, "parameter_server.json")
sys.path.insert(0, HERE)
import dashboard_check  # noqa: E402


def load():
    with open(DASHBOARD, encoding="utf-8") as f:
        return json.load(f)


def first(d, title_part):
    for panel in dashboard_check.panels(d):
        if title_part in panel.get("title", ""):
            return panel
    raise AssertionError("no panel titled *%s*" % title_part)


class DashboardTest(unittest.TestCase):
    def test_the_dashboard_passes(self):
        summary = dashboard_check.check_dashboard(DASHBOARD)
        print(summary)

    def test_every_metric_is_drawn(self):
        used = set()
        for _, _, expr in dashboard_check.expressions(DASHBOARD):
            used |= {dashboard_check.metric_of(n)[0] for n in dashboard_check._NAME.findall(expr)}
        self.assertEqual(sorted(set(dashboard_check.METRICS) - used), [])

    def test_the_panels_an_operator_needs_first(self):
        d = load()
        titles = [p["title"] for p in dashboard_check.panels(d)]
        for part in ("Keys pulled per second", "Keys pushed per second", "Samples per second per worker",
                     "latency p50", "latency p99", "RPC errors per second by method and code",
                     "Rows per server and table", "Memory per server and table", "Replica lag",
                     "Pull staleness", "Late pushes dropped", "Step per worker", "Training loss",
                     "Running AUC", "Members by role and state", "Failovers"):
            self.assertTrue(any(part in t for t in titles), "no panel titled *%s*" % part)
        self.assertEqual(d["schemaVersion"], 37)
        self.assertIn("histogram_quantile(0.99", json.dumps(d))

    def test_exprs_for_prometheus_have_no_variables_left(self):
        out = subprocess.run([sys.executable, os.path.join(HERE, "dashboard_check.py"), "--exprs"],
                             capture_output=True, text=True, check=True).stdout.splitlines()
        self.assertEqual(len(out), len(dashboard_check.expressions(DASHBOARD)))
        for expr in out:
            self.assertNotIn("$", expr)
            self.assertTrue(expr.strip())
        self.assertIn('sum by (instance) (rate(ps_server_keys_pulled_total{job=~".*"}[1m]))', out)

    def test_every_expr_parses_as_promql(self):
        # promtool (Debian's prometheus, deploy/setup.sh) parses each expression as a recording
        # rule: Prometheus's own PromQL parser. JSON is YAML.
        promtool = "/usr/bin/promtool"
        self.assertTrue(os.access(promtool, os.X_OK),
                        "no %s: deploy/setup.sh installs Debian's prometheus" % promtool)
        exprs = dashboard_check.expressions(DASHBOARD)
        rules = {"groups": [{"name": "dashboard", "rules": [
            {"record": "dashboard:%s:%s" % (i, ref), "expr": expr}
            for i, (_, ref, expr) in enumerate(exprs)]}]}
        with tempfile.TemporaryDirectory(dir=os.environ.get("TEST_TMPDIR")) as tmp:
            path = os.path.join(tmp, "rules.yml")
            with open(path, "w") as f:
                json.dump(rules, f)
            p = subprocess.run([promtool, "check", "rules", path], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("SUCCESS: %d rules found" % len(exprs), p.stdout)
        # And a broken one is refused, so the check means something.
        with tempfile.TemporaryDirectory(dir=os.environ.get("TEST_TMPDIR")) as tmp:
            path = os.path.join(tmp, "rules.yml")
            with open(path, "w") as f:
                json.dump({"groups": [{"name": "x", "rules": [
                    {"record": "x:y", "expr": "sum by (le (rate(ps_server_rows[1m]))"}]}]}, f)
            p = subprocess.run([promtool, "check", "rules", path], capture_output=True, text=True)
        self.assertNotEqual(p.returncode, 0)


class RefusalTest(unittest.TestCase):
    """Each breakage of a copy of the dashboard is refused, naming the panel and the problem."""

    def setUp(self):
        self.dir = tempfile.TemporaryDirectory(dir=os.environ.get("TEST_TMPDIR"))
        self.path = os.path.join(self.dir.name, "broken.json")

    def tearDown(self):
        self.dir.cleanup()

    def refused(self, break_it, expected):
        d = load()
        break_it(d)
        with open(self.path, "w") as f:
            json.dump(d, f)
        with self.assertRaises(dashboard_check.DashboardError) as e:
            dashboard_check.check_dashboard(self.path)
        self.assertIn(expected, str(e.exception))
        print("refused: %s" % e.exception)

    def set_expr(self, title, expr):
        def f(d):
            first(d, title)["targets"][0]["expr"] = expr
        return f

    def test_not_json(self):
        with open(self.path, "w") as f:
            f.write('{"panels": [')
        with self.assertRaises(dashboard_check.DashboardError) as e:
            dashboard_check.check_dashboard(self.path)
        self.assertIn("not JSON", str(e.exception))

    def test_a_misspelt_metric(self):
        self.refused(self.set_expr("Keys pulled", 'sum(rate(ps_server_keys_pull_total[5m]))'),
                     "unknown metric ps_server_keys_pull_total")

    def test_a_metric_of_another_project(self):
        self.refused(self.set_expr("Keys pulled", 'sum(rate(ps_server_requests_total[5m]))'),
                     "unknown metric ps_server_requests_total")

    def test_a_panel_without_targets(self):
        def f(d):
            first(d, "Keys pushed")["targets"] = []
        self.refused(f, "'Keys pushed per second' (id")

    def test_an_empty_expr(self):
        self.refused(self.set_expr("Pull staleness", "  "), "an empty expr")

    def test_a_panel_without_a_title(self):
        def f(d):
            first(d, "Pull staleness")["title"] = ""
        self.refused(f, "no title")

    def test_a_panel_without_a_datasource(self):
        def f(d):
            del first(d, "Pull staleness")["datasource"]
        self.refused(f, "datasource None")

    def test_a_counter_without_rate(self):
        self.refused(self.set_expr("Keys pulled", "sum(ps_server_keys_pulled_total)"),
                     "counter ps_server_keys_pulled_total outside rate()")

    def test_a_gauge_inside_rate(self):
        self.refused(self.set_expr("Rows per server", "rate(ps_server_rows[1m])"),
                     "gauge ps_server_rows inside rate()")

    def test_a_histogram_without_its_suffix(self):
        self.refused(self.set_expr("AllReduce", "ps_worker_allreduce_duration_seconds"),
                     "without _bucket, _sum or _count")

    def test_buckets_without_histogram_quantile(self):
        self.refused(self.set_expr("AllReduce", "sum(rate(ps_worker_allreduce_duration_seconds_bucket[1m]))"),
                     "outside histogram_quantile()")

    def test_buckets_not_grouped_by_le(self):
        self.refused(self.set_expr("AllReduce", "histogram_quantile(0.99, sum by (rank) "
                                   "(rate(ps_worker_allreduce_duration_seconds_bucket[1m])))"),
                     "not grouped by le")

    def test_a_label_the_metric_does_not_have(self):
        self.refused(self.set_expr("Rows per server", 'ps_server_rows{rank="0"}'),
                     "ps_server_rows has no label rank")

    def test_grouping_by_a_label_no_metric_has(self):
        self.refused(self.set_expr("Rows per server", "sum by (method) (ps_server_rows)"),
                     "grouping by method")

    def test_an_unknown_variable(self):
        self.refused(self.set_expr("Rows per server", 'ps_server_rows{job=~"$cluster"}'),
                     "$cluster is not a variable")

    def test_overlapping_panels(self):
        def f(d):
            a, b = first(d, "Keys pulled"), first(d, "Keys pushed")
            b["gridPos"] = copy.deepcopy(a["gridPos"])
        self.refused(f, "overlaps panel 'Keys pulled per second'")

    def test_a_duplicate_id(self):
        def f(d):
            first(d, "Keys pushed")["id"] = first(d, "Keys pulled")["id"]
        self.refused(f, "id taken by panel 'Keys pulled per second'")

    def test_an_unknown_metric_in_a_variable(self):
        def f(d):
            d["templating"]["list"][1]["query"]["query"] = "label_values(ps_server_up, job)"
        self.refused(f, "variable $job: unknown metric ps_server_up")

    def test_an_old_schema(self):
        def f(d):
            d["schemaVersion"] = 16
        self.refused(f, "schemaVersion 16")


if __name__ == "__main__":
    unittest.main(verbosity=2)
