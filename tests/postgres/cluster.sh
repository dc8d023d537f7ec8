#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for the tests: the one implementation that both .ci/run
# and the Rust harness (tests/support/src/postgres.rs) use.
#
# Usage:
#   cluster.sh bindir              print the directory of initdb/pg_ctl/psql, or fail
#                                  saying what to install
#   cluster.sh supervise           make and start a cluster in a new temporary directory,
#                                  print "DIR:PORT" on stdout, then wait for end of file
#                                  on stdin; at EOF (the caller exited, however it died)
#                                  or on INT/TERM/HUP stop it and remove DIR
#   cluster.sh server DIR start|stop-fast|stop-immediate
#                                  start or stop the server of a cluster made here
#
# The cluster: superuser aegis_admin, trust authentication, UTF8, a database "aegis",
# no TCP (listen_addresses = ''), a Unix socket in DIR, fsync and synchronous_commit on.
# Running as root (CI), initdb and the server run as $AEGIS_PG_USER (default nobody)
# through runuser, because PostgreSQL refuses to run as root; DIR belongs to that user.
#
# Binaries: $AEGIS_PG_BIN, else the newest /usr/lib/postgresql/*/bin, else initdb on
# PATH, else pg_config --bindir.
set -euo pipefail

SUPERUSER=aegis_admin
DATABASE=aegis
# Enough for the tests' 40+ concurrent clients with room for psql and the harness.
MAX_CONNECTIONS=120
# Seconds pg_ctl waits for the server to start or stop before giving up.
TIMEOUT=60

die() {
  echo "cluster.sh: $*" >&2
  exit 1
}

# Prints the binaries' directory, having checked that every one used here is in it.
find_bindir() {
  local d b
  d="$(candidate_bindir)" || exit 1
  for b in initdb pg_ctl postgres psql pg_isready createdb; do
    [[ -x "$d/$b" ]] || die "$d/$b is missing: install the PostgreSQL server and client (Debian/Ubuntu: apt-get install postgresql-15) or set AEGIS_PG_BIN"
  done
  echo "$d"
}

candidate_bindir() {
  local d
  if [[ -n "${AEGIS_PG_BIN:-}" ]]; then
    [[ -x "$AEGIS_PG_BIN/initdb" ]] || die "AEGIS_PG_BIN=$AEGIS_PG_BIN has no initdb"
    echo "$AEGIS_PG_BIN"
    return
  fi
  d="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)"
  if [[ -n "$d" && -x "$d/initdb" ]]; then
    echo "$d"
    return
  fi
  # Resolved: Debian links initdb into /usr/local/bin or /usr/bin without its siblings.
  if command -v initdb >/dev/null; then
    dirname "$(readlink -f "$(command -v initdb)")"
    return
  fi
  if command -v pg_config >/dev/null; then
    d="$(pg_config --bindir)"
    if [[ -x "$d/initdb" ]]; then
      echo "$d"
      return
    fi
  fi
  die "PostgreSQL server binaries (initdb, pg_ctl, postgres, psql) not found; the tests need a real server: install it (Debian/Ubuntu: apt-get install postgresql-15) or set AEGIS_PG_BIN to the directory holding initdb"
}

# Runs a command as the cluster's owner: through runuser when we are root.
as_owner() {
  if [[ -n "${OWNER:-}" ]]; then
    runuser -u "$OWNER" -- "$@"
  else
    "$@"
  fi
}

# The last lines of the server's log, for an error message.
log_tail() {
  if [[ -f "$1/server.log" ]]; then
    echo "--- last lines of $1/server.log:" >&2
    tail -n 20 "$1/server.log" >&2
  fi
}

# Reads what `make_cluster` recorded about DIR.
load() {
  local dir="$1"
  [[ -f "$dir/cluster.env" ]] || die "$dir is not a cluster made by cluster.sh"
  # shellcheck source=/dev/null
  . "$dir/cluster.env"
}

server() {
  local dir="$1" what="$2"
  load "$dir"
  cd "$dir" # the owner may not be able to read our working directory
  case "$what" in
    start)
      as_owner "$BINDIR/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t "$TIMEOUT" start \
        >/dev/null || { log_tail "$dir"; die "the server in $dir did not start"; }
      # pg_ctl -w waits for connections to be accepted; pg_isready says so independently.
      "$BINDIR/pg_isready" -q -h "$dir" -p "$PORT" -t "$TIMEOUT" ||
        { log_tail "$dir"; die "the server in $dir does not accept connections"; }
      ;;
    stop-fast | stop-immediate)
      as_owner "$BINDIR/pg_ctl" -D "$dir/data" -m "${what#stop-}" -w -t "$TIMEOUT" stop \
        >/dev/null || { log_tail "$dir"; die "the server in $dir did not stop"; }
      ;;
    *) die "server: unknown action $what" ;;
  esac
}

# Makes and starts a cluster in a new temporary directory; sets DIR and PORT.
make_cluster() {
  BINDIR="$(find_bindir)" || exit 1
  OWNER=""
  if [[ "$(id -u)" == 0 ]]; then
    OWNER="${AEGIS_PG_USER:-nobody}"
    command -v runuser >/dev/null || die "running as root needs runuser (util-linux) to run PostgreSQL as $OWNER"
  fi
  # A Unix socket's path is limited to 107 bytes: a long TMPDIR falls back to /tmp.
  local base="${TMPDIR:-/tmp}"
  ((${#base} <= 64)) || base=/tmp
  DIR="$(mktemp -d "$base/aegis-pg.XXXXXX")"
  # Without TCP the port only names the socket file, which is alone in DIR; it still
  # picks PostgreSQL's shared-memory key, so spread clusters over a range.
  PORT=$((20000 + RANDOM % 30000))
  printf 'BINDIR=%q\nOWNER=%q\nPORT=%q\n' "$BINDIR" "$OWNER" "$PORT" >"$DIR/cluster.env"
  [[ -z "$OWNER" ]] || chown "$OWNER" "$DIR"
  cd "$DIR"
  # --no-sync: only initdb's own files skip the flush; the server runs with fsync on,
  # which is what a test of durability relies on, and the cluster dies with the run.
  as_owner "$BINDIR/initdb" -D "$DIR/data" -U "$SUPERUSER" --auth=trust -E UTF8 \
    --no-locale --no-sync >"$DIR/initdb.log" 2>&1 ||
    { tail -n 20 "$DIR/initdb.log" >&2; die "initdb failed in $DIR"; }
  # In postgresql.conf, not on the command line, so that a restart keeps them.
  as_owner tee -a "$DIR/data/postgresql.conf" >/dev/null <<EOF
# cluster.sh: a throwaway cluster for the tests
listen_addresses = ''
unix_socket_directories = '$DIR'
port = $PORT
max_connections = $MAX_CONNECTIONS
fsync = on
synchronous_commit = on
full_page_writes = on
EOF
  server "$DIR" start
  "$BINDIR/createdb" -h "$DIR" -p "$PORT" -U "$SUPERUSER" "$DATABASE" ||
    die "createdb $DATABASE failed in $DIR"
}

# Stops the server (immediately: the cluster is thrown away) and removes DIR.
destroy() {
  local dir="$1"
  if [[ -f "$dir/data/postmaster.pid" ]]; then
    (server "$dir" stop-immediate) || true
  fi
  rm -rf "$dir"
}

case "${1:-}" in
  bindir)
    find_bindir
    ;;
  supervise)
    DIR=""
    trap '[[ -z "$DIR" ]] || destroy "$DIR"' EXIT
    trap 'exit 1' INT TERM HUP
    make_cluster
    echo "$DIR:$PORT"
    # The caller may stop reading (or be gone); nothing more is said.
    exec >/dev/null 2>&1
    while read -r _; do :; done
    ;;
  server)
    [[ $# == 3 ]] || die "usage: cluster.sh server DIR start|stop-fast|stop-immediate"
    server "$2" "$3"
    ;;
  *)
    die "usage: cluster.sh bindir | supervise | server DIR start|stop-fast|stop-immediate"
    ;;
esac
