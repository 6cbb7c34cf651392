#!/usr/bin/env bash
# The store's COPY path (issue 17) against a real PostgreSQL: awkward values
# stored as meant, a batch meeting rows already stored writes only its new
# ones, a refused batch is retried, and store_flush_then answers only once
# every trial is visible (tests/integration/store-check.c says how).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/pg.sh"
pg_start
timeout 180 "$NW_BUILD_DIR/tests/integration/store-check"
