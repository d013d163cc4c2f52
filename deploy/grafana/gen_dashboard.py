#!/usr/bin/env python3
"""Writes counterd.json, the Grafana dashboard for counterd.

Run from this directory (python3 gen_dashboard.py) after changing the
panels below; deploy/deploy_test.go checks every query of the JSON with
promtool and checks that each metric it names is one counterd registers.
"""
import json

SEL = 'job="counterd", instance=~"$instance"'
RATE = "$__rate_interval"

rows = [
    ("Overview", [
        ("Nodes up", "stat", [('sum(up{job="counterd"})', "up")], "short"),
        ("Version", "table", [(f'counterd_build_info{{{SEL}}}', "{{instance}} {{version}}")], "short"),
        ("Cluster members", "timeseries", [(f'max by (state) (counterd_cluster_members{{{SEL}}})', "{{state}}")], "short"),
        ("Counters", "timeseries", [(f'sum by (instance) (counterd_engine_keys{{{SEL}}})', "{{instance}}")], "short"),
    ]),
    ("HTTP", [
        ("Requests/s by route", "timeseries", [(f'sum by (op) (rate(counterd_http_requests_total{{{SEL}}}[{RATE}]))', "{{op}}")], "reqps"),
        ("Errors/s by status", "timeseries", [(f'sum by (code) (rate(counterd_http_requests_total{{{SEL}, code!~"2.."}}[{RATE}]))', "{{code}}")], "reqps"),
        ("Latency p99 by route", "timeseries", [(f'histogram_quantile(0.99, sum by (le, op) (rate(counterd_http_request_duration_seconds_bucket{{{SEL}}}[{RATE}])))', "{{op}}")], "s"),
        ("Rejected connections/s", "timeseries", [(f'sum by (instance) (rate(counterd_http_rejected_connections_total{{{SEL}}}[{RATE}]))', "{{instance}}")], "short"),
    ]),
    ("Redis protocol", [
        ("Commands/s", "timeseries", [(f'sum by (cmd) (rate(counterd_resp_commands_total{{{SEL}}}[{RATE}]))', "{{cmd}}")], "ops"),
        ("Command latency p99", "timeseries", [(f'histogram_quantile(0.99, sum by (le, cmd) (rate(counterd_resp_command_duration_seconds_bucket{{{SEL}}}[{RATE}])))', "{{cmd}}")], "s"),
        ("Connections", "timeseries", [(f'sum by (instance) (counterd_resp_connections{{{SEL}}})', "{{instance}}")], "short"),
        ("Rejected connections and protocol errors/s", "timeseries", [
            (f'sum by (instance) (rate(counterd_resp_rejected_connections_total{{{SEL}}}[{RATE}]))', "rejected {{instance}}"),
            (f'sum by (instance) (rate(counterd_resp_protocol_errors_total{{{SEL}}}[{RATE}]))', "protocol errors {{instance}}"),
        ], "short"),
    ]),
    ("Overload", [
        ("Shed requests/s", "timeseries", [(f'sum by (instance, front_end) (rate(counterd_shed_requests_total{{{SEL}}}[{RATE}]))', "{{instance}} {{front_end}}")], "reqps"),
    ]),
    ("Storage", [
        ("Mutations/s", "timeseries", [(f'sum by (instance) (rate(counterd_engine_ops_total{{{SEL}}}[{RATE}]))', "{{instance}}")], "ops"),
        ("Flushes and flush failures/s", "timeseries", [
            (f'sum by (instance) (rate(counterd_engine_flushes_total{{{SEL}}}[{RATE}]))', "flushes {{instance}}"),
            (f'sum by (instance) (rate(counterd_engine_flush_failures_total{{{SEL}}}[{RATE}]))', "failures {{instance}}"),
        ], "short"),
        ("Seconds since the last flush", "timeseries", [(f'time() - counterd_engine_last_flush_timestamp_seconds{{{SEL}}}', "{{instance}}")], "s"),
        ("Dirty counters and idempotency records", "timeseries", [
            (f'counterd_engine_dirty_keys{{{SEL}}}', "dirty {{instance}}"),
            (f'counterd_engine_idempotency_records{{{SEL}}}', "idempotency {{instance}}"),
        ], "short"),
    ]),
    ("Cluster", [
        ("Replication lag", "timeseries", [(f'counterd_cluster_replication_lag_seconds{{{SEL}}}', "{{instance}}")], "s"),
        ("Convergence p99", "timeseries", [(f'histogram_quantile(0.99, sum by (le, instance) (rate(counterd_cluster_convergence_seconds_bucket{{{SEL}}}[{RATE}])))', "{{instance}}")], "s"),
        ("Forwarded requests/s by result", "timeseries", [(f'sum by (result) (rate(counterd_cluster_forwarded_total{{{SEL}}}[{RATE}]))', "{{result}}")], "reqps"),
        ("Ring version", "timeseries", [(f'counterd_cluster_ring_version{{{SEL}}}', "{{instance}}")], "short"),
        ("Handoff and failover/s", "timeseries", [
            (f'sum by (result) (rate(counterd_cluster_handoff_total{{{SEL}}}[{RATE}]))', "handoff {{result}}"),
            (f'sum by (result) (rate(counterd_cluster_failover_total{{{SEL}}}[{RATE}]))', "failover {{result}}"),
            (f'sum(rate(counterd_cluster_anti_entropy_repairs_total{{{SEL}}}[{RATE}]))', "anti-entropy repairs"),
        ], "short"),
        ("Fence p99", "timeseries", [(f'histogram_quantile(0.99, sum by (le) (rate(counterd_cluster_fence_seconds_bucket{{{SEL}}}[{RATE}])))', "fence")], "s"),
    ]),
    ("Process", [
        ("CPU (cores)", "timeseries", [(f'rate(process_cpu_seconds_total{{{SEL}}}[{RATE}])', "{{instance}}")], "short"),
        ("Resident memory", "timeseries", [(f'process_resident_memory_bytes{{{SEL}}}', "{{instance}}")], "bytes"),
        ("Goroutines", "timeseries", [(f'go_goroutines{{{SEL}}}', "{{instance}}")], "short"),
        ("Open file descriptors", "timeseries", [(f'process_open_fds{{{SEL}}}', "{{instance}}")], "short"),
    ]),
]

DS = {"type": "prometheus", "uid": "${datasource}"}
panels = []
pid = 1
y = 0
for title, items in rows:
    panels.append({"id": pid, "type": "row", "title": title, "collapsed": False,
                   "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}, "panels": []})
    pid += 1
    y += 1
    for i, (ptitle, ptype, targets, unit) in enumerate(items):
        p = {
            "id": pid, "type": ptype, "title": ptitle, "datasource": DS,
            "gridPos": {"h": 8, "w": 6, "x": (i % 4) * 6, "y": y + (i // 4) * 8},
            "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
            "options": {},
            "targets": [{"refId": chr(ord("A") + j), "datasource": DS, "expr": e, "legendFormat": lf}
                        for j, (e, lf) in enumerate(targets)],
        }
        if ptype == "table":
            p["targets"][0]["format"] = "table"
            p["targets"][0]["instant"] = True
        panels.append(p)
        pid += 1
    y += ((len(items) + 3) // 4) * 8

dash = {
    "title": "counterd",
    "uid": "counterd",
    "description": "counterd nodes: HTTP and Redis-protocol traffic, overload shedding, storage flushes, cluster replication (deploy/grafana/gen_dashboard.py).",
    "tags": ["counterd"],
    "timezone": "browser",
    "schemaVersion": 39,
    "version": 1,
    "editable": True,
    "refresh": "30s",
    "time": {"from": "now-6h", "to": "now"},
    "templating": {"list": [
        {"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Data source"},
        {"name": "instance", "type": "query", "datasource": DS, "label": "Instance",
         "query": {"query": 'label_values(up{job="counterd"}, instance)', "refId": "instance"},
         "definition": 'label_values(up{job="counterd"}, instance)',
         "includeAll": True, "multi": True, "allValue": ".*", "refresh": 2,
         "current": {"selected": True, "text": ["All"], "value": ["$__all"]}},
    ]},
    "annotations": {"list": []},
    "panels": panels,
}

with open("counterd.json", "w") as f:
    json.dump(dash, f, indent=2)
    f.write("\n")
