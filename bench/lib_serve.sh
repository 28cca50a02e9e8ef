# Sourced by bench scripts: use the server at $HOST:$PORT if one answers /health, otherwise start
# `make serve` there (MODEL, and SERVE_ARGS if set) and stop it by the PID of its python process on
# exit (normal or failure). HOST, PORT, MODEL default to `make serve`'s; sets LOGDIR (a temp dir
# holding server.log).
HOST=${HOST:-127.0.0.1}
PORT=${PORT:-30000}
MODEL=${MODEL:-models/pask-tiny-fc}
LOGDIR=$(mktemp -d)
started_pid=""

stop_started_server() {
  if [[ -n "$started_pid" ]] && kill -0 "$started_pid" 2>/dev/null; then
    kill -TERM "$started_pid" 2>/dev/null || true
    for _ in $(seq 1 40); do kill -0 "$started_pid" 2>/dev/null || break; sleep 0.5; done
    kill -KILL "$started_pid" 2>/dev/null || true
  fi
}
trap stop_started_server EXIT

healthy() { curl -sf "http://$HOST:$PORT/health" >/dev/null 2>&1; }

ensure_server() {
  healthy && { echo "using the server already at $HOST:$PORT"; return 0; }
  make -s install >/dev/null
  echo "starting make serve MODEL=$MODEL on $HOST:$PORT (log: $LOGDIR/server.log)"
  make -s serve HOST="$HOST" PORT="$PORT" MODEL="$MODEL" SERVE_ARGS="${SERVE_ARGS:-}" >"$LOGDIR/server.log" 2>&1 &
  for _ in $(seq 1 240); do
    started_pid=$(pgrep -f "sglang_pask.launch_server .*--port $PORT" | head -n 1 || true)
    if grep -q "Errno 98" "$LOGDIR/server.log"; then echo "port $PORT is taken" >&2; exit 1; fi
    if [[ -n "$started_pid" ]] && healthy; then return 0; fi
    sleep 1
  done
  echo "server did not come up:" >&2; tail -n 40 "$LOGDIR/server.log" >&2; exit 1
}
