#!/usr/bin/env python3
"""Latencies of numwatchd's queries, from PostgreSQL's log.

  scale-report.py LOG OFFSET

LOG is a server log written with log_min_duration_statement = 0; only what
follows byte OFFSET is read. Each statement the daemon ran (extended
protocol: the 'execute' line) is named by the query path it belongs to
(the table below; others by their first words), and one tab-separated line
per path is printed: path, calls, median ms, max ms, total ms, most costly
first. Lines that report an ERROR are counted and printed on stderr; the exit
status is 1 when there is any.
"""
import re
import statistics
import sys

# (name, a substring of the statement), first match wins.
PATHS = [
    ("judge: judge_input()", "FROM judge_input("),
    ("judge: judge_record()", "FROM judge_record("),
    ("judge: judge_wait_for_baseline()", "judge_wait_for_baseline("),
    ("bisector: queue_bisections()", "queue_bisections("),
    ("bisector: load (one step)", "SELECT json_build_object('id', b.id, 'state', b.state"),
    ("bisector: save (bisection_ended trigger)", "UPDATE bisections SET state = $2"),
    ("bisector: queue a probe", "INSERT INTO jobs (kind, commit_id, check_id, dtype, priority, seeds, bisection_id,"),
    ("bisector: running bisections", "FROM bisections b WHERE b.repo_id = $1 AND b.state <> 'done'"),
    ("bisector: hurry builds", "UPDATE jobs SET priority = 10"),
    ("mailer: sweep", "SELECT 'culprit', b.id"),
    ("mailer: culprit mail facts", "SELECT k.name, b.dtype, b.confidence"),
    ("mailer: claim", "WITH next AS (SELECT m.id FROM mail m"),
    ("mailer: rate", "SELECT extract(epoch FROM n.t)"),
    ("mailer: queue a mail", "WITH ins AS (INSERT INTO mail"),
    ("jobs: claim", "SELECT j.id FROM jobs j JOIN commits c ON c.id = j.commit_id"),
    ("jobs: renew lease", "UPDATE jobs SET lease_until"),
    ("slot: stored trials of a job", "SELECT seed, attempt, outcome, ratio, coalesce(sanitizer, '') FROM trials"),
    ("slot: probe done", "WITH j AS (UPDATE jobs SET state = $8"),
    ("store: trials batch", "INSERT INTO trials"),
    ("poller: store the history", "AS t(sha text, parent text"),
    ("poller: polled_at", "UPDATE repositories SET polled_at"),
    ("builder: checks and trials jobs", "AS t(name text, op text"),
    ("builder: build row", "INSERT INTO builds"),
    ("api: /api/v1/commits", "'repository', (SELECT name FROM repositories"),
    ("api: /api/v1/commits/{sha}", "'sha', c.sha, 'parent', c.parent_sha"),
    ("api: /api/v1/checks", "SELECT json_build_object('checks'"),
    ("api: /api/v1/checks/{name}", "WITH k AS (SELECT * FROM checks WHERE repo_id = $1 AND name = $2)"),
    ("api: /api/v1/trials", "FROM trials t JOIN checks k ON k.id = t.check_id"),
    ("api: /api/v1/bisections", "SELECT json_build_object('total', (SELECT count(*) FROM bisections"),
    ("api: /api/v1/bisections/{id}", "WITH b AS (SELECT * FROM bisections WHERE repo_id = $1 AND id"),
    ("api: /api/v1/regressions", "api_regressions("),
    ("api: /api/v1/regressions/{id}", " api_regression($1"),
    ("api: /api/v1/health", "'queue', (SELECT coalesce(json_object_agg(kind || '_' || state"),
    ("api: /metrics", "(SELECT count(*) FROM bisections WHERE state <> 'done')"),
    ("api: cache snapshot", "SELECT pg_current_snapshot()::text"),
    ("api: token", "UPDATE tokens SET last_used"),
    ("api: POST /api/v1/bisections", "WITH k AS (SELECT id FROM checks WHERE repo_id = $1 AND name = $4"),
]

LINE = re.compile(r"duration: ([0-9.]+) ms +execute [^:]*: (.*)")


def name(sql):
    for label, needle in PATHS:
        if needle in sql:
            return label
    return "other: " + " ".join(sql.split())[:60]


def main(argv):
    if len(argv) != 3:
        sys.exit(__doc__)
    times = {}
    errors = 0
    with open(argv[1], "rb") as f:
        f.seek(int(argv[2]))
        for raw in f:
            line = raw.decode("utf-8", "replace")
            if "ERROR:" in line:
                errors += 1
                sys.stderr.write(line)
            m = LINE.search(line)
            if m:
                times.setdefault(name(m.group(2)), []).append(float(m.group(1)))
    rows = sorted(times.items(), key=lambda kv: -max(kv[1]))
    for label, t in rows:
        print("%s\t%d\t%.1f\t%.1f\t%.0f" % (label, len(t), statistics.median(t), max(t), sum(t)))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
