#!/usr/bin/env bash
# The webqa demo, end to end, on a machine with nothing but Python 3.11+:
#
#   1. scripts/setup.sh (creates .venv and installs webqa; a no-op the second time)
#   2. serves the sample site demo/site on 127.0.0.1 (port 8787, or a free one if taken)
#   3. writes build/demo/job.yaml from the template demo/job.yaml with that port
#   4. webqa run build/demo/job.yaml --db build/demo/demo.duckdb
#      - answers with the LLM when Ollama answers at $OLLAMA_HOST (default http://localhost:11434)
#        and has the job's model (llama3.2:3b); otherwise webqa prints one "Notice:" line and
#        answers extractively, quoting the best sentences of the pages with citations
#   5. prints the Markdown report, what the crawl skipped and why, and where the files are.
#
# Exit status is webqa's: 0 = every question answered ("Not enough information" counts as an
# answer — the demo has one question the site cannot answer), 1 = some questions failed
# (partial run). Both mean the demo itself worked. 2 or more is a real failure (see the
# message above it; 3 with a reachable Ollama usually means the model is not pulled).
#
# Run it again: the second crawl sends conditional requests and the server answers 304 Not
# Modified for every page. Environment:
#   DEMO_PORT=9000          port to try first (default 8787)
#   DEMO_ANSWERER=extractive  force the extractive answerer even when Ollama is up
#   OLLAMA_HOST=host:port   where Ollama runs
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$(pwd)
BUILD="$ROOT/build/demo"
DB="$BUILD/demo.duckdb"
JOB="$BUILD/job.yaml"
PORT_FILE="$BUILD/server.port"
LAST_PORT_FILE="$BUILD/last-port"
PY="$ROOT/.venv/bin/python"
WEBQA="$ROOT/.venv/bin/webqa"

say() { echo "demo: $*"; }

scripts/setup.sh

mkdir -p "$BUILD"
rm -f "$PORT_FILE"

# The sample site, in the background; stopped however this script ends.
"$PY" demo/serve.py --port "${DEMO_PORT:-8787}" --port-file "$PORT_FILE" >/dev/null &
SERVER_PID=$!
stop_server() {
    if kill -0 "$SERVER_PID" 2>/dev/null; then
        kill "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
    fi
}
trap stop_server EXIT
trap 'exit 130' INT TERM

for _ in $(seq 1 100); do  # up to 10 s
    [ -s "$PORT_FILE" ] && break
    kill -0 "$SERVER_PID" 2>/dev/null || { echo "demo: ERROR: the demo server did not start (see above)" >&2; exit 3; }
    sleep 0.1
done
[ -s "$PORT_FILE" ] || { echo "demo: ERROR: the demo server did not report its port within 10 s" >&2; exit 3; }
PORT=$(cat "$PORT_FILE")
BASE="http://127.0.0.1:$PORT"
"$PY" - "$BASE/robots.txt" <<'EOF' || { echo "demo: ERROR: the demo server does not answer at $BASE" >&2; exit 3; }
import sys, time, urllib.request
for _ in range(50):
    try:
        with urllib.request.urlopen(sys.argv[1], timeout=2) as response:
            sys.exit(0 if response.status == 200 else 1)
    except OSError:
        time.sleep(0.1)
sys.exit(1)
EOF
say "serving demo/site at $BASE/ (pid $SERVER_PID)"

# Pages are stored under their URL, port included. A different port than last time would leave
# the old copies in the database next to the new ones (and answer from both): start afresh.
if [ -f "$LAST_PORT_FILE" ] && [ "$(cat "$LAST_PORT_FILE")" != "$PORT" ] && [ -e "$DB" ]; then
    say "the server port changed ($(cat "$LAST_PORT_FILE") → $PORT); starting with a new database and output folder"
    rm -rf "$DB" "$DB.wal" "$DB.robots.json" "$BUILD/out"
fi
echo "$PORT" > "$LAST_PORT_FILE"

sed "s/__PORT__/$PORT/g" demo/job.yaml > "$JOB"
say "wrote $JOB"

ARGS=(run "$JOB" --db "$DB")
if [ -n "${DEMO_ANSWERER:-}" ]; then
    ARGS+=(--answerer "$DEMO_ANSWERER")
fi
say "running: .venv/bin/webqa ${ARGS[*]#"$ROOT/"}"
echo
set +e
"$WEBQA" "${ARGS[@]}" | tee "$BUILD/webqa.out"
RC=${PIPESTATUS[0]}
set -e
echo

REPORT=$(grep -E '/report\.md$' "$BUILD/webqa.out" | tail -n 1 | sed 's/^ *//' || true)
if [ -n "$REPORT" ] && [ -f "$REPORT" ]; then
    echo "==================================== $REPORT"
    cat "$REPORT"
    echo
    echo "===================================="
fi

# What the crawl did not store, and why: the robots.txt-disallowed page.
if [ -e "$DB" ]; then
    "$PY" - "$DB" <<'EOF' || true
import sys
import duckdb
con = duckdb.connect(sys.argv[1], read_only=True)
last = con.execute("SELECT max(crawl_run_id) FROM fetch_log").fetchone()[0]
rows = con.execute(
    "SELECT url, outcome, coalesce(CAST(status AS VARCHAR), '-'), reason FROM fetch_log "
    "WHERE crawl_run_id = ? ORDER BY fetch_log_id", [last]).fetchall() if last is not None else []
print(f"Crawl log (SELECT url, outcome, status, reason FROM fetch_log WHERE crawl_run_id = {last}):")
for url, outcome, status, reason in rows:
    print(f"  {outcome:<8} {status:>4}  {url}  ({reason})")
if not rows:
    print("  (nothing skipped or failed)")
EOF
fi

echo
if [ -n "$REPORT" ]; then
    say "report: ${REPORT#"$ROOT/"}"
    say "answers as JSON lines: $(dirname "${REPORT#"$ROOT/"}")/answers.jsonl"
fi
say "database: ${DB#"$ROOT/"}  (try: .venv/bin/webqa explain ANSWER_ID --db ${DB#"$ROOT/"})"
case "$RC" in
    0) say "done: every question answered (exit 0)" ;;
    1) say "done: a partial run (some questions or pages failed, see above), the rest was answered (exit 1)" ;;
    *) say "webqa failed with exit status $RC (see the Error line above)"
       say "hint: with Ollama running but without the model, run 'ollama pull llama3.2:3b' or DEMO_ANSWERER=extractive $0" ;;
esac
exit "$RC"
