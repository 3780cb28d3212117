#!/usr/bin/env bash
# Make sure a MariaDB answers on 127.0.0.1:3306 with a user and database for forkq's tests.
#
# Meant for a fresh Debian 12 host or container, run as root (CI, `make test`). Idempotent:
# on a machine where MariaDB already answers it only (re)creates the test user and
# database. It never stops, restarts or reconfigures a server that is already running.
#
# Prints the URL to give the tests (FORKQ_TEST_MYSQL_URL) on its last line of stdout.
set -euo pipefail

HOST="${FORKQ_DB_HOST:-127.0.0.1}"
PORT="${FORKQ_DB_PORT:-3306}"
DB_USER="${FORKQ_DB_USER:-forkq}"
DB_PASSWORD="${FORKQ_DB_PASSWORD:-forkq}"
DB_NAME="${FORKQ_DB_NAME:-forkq_test}"
DATADIR=/var/lib/mysql
LOG=/tmp/forkq-mariadbd.log
START_DEADLINE=60 # seconds to wait for a server we started

log() { echo "ensure-mariadb: $*" >&2; }
die() { log "error: $*"; exit 1; }

client() { command -v mariadb || command -v mysql || true; }
admin() { command -v mariadb-admin || command -v mysqladmin || true; }

# "Answers" means a server speaks the protocol on HOST:PORT; mariadb-admin ping exits 0
# then even when the login is refused, which is what we want to know here.
server_answers() {
  local tool
  tool="$(admin)"
  [[ -n "$tool" ]] || return 1
  "$tool" --no-defaults --protocol=TCP -h "$HOST" -P "$PORT" --connect-timeout=2 ping \
    >/dev/null 2>&1
}

test_login_works() {
  local tool
  tool="$(client)"
  [[ -n "$tool" ]] || return 1
  MYSQL_PWD="$DB_PASSWORD" "$tool" --no-defaults --protocol=TCP -h "$HOST" -P "$PORT" \
    -u "$DB_USER" --connect-timeout=2 -e "SELECT 1" "$DB_NAME" >/dev/null 2>&1
}

install_packages() {
  if command -v mariadbd >/dev/null && [[ -n "$(client)" && -n "$(admin)" ]]; then
    return
  fi
  [[ "$(id -u)" == 0 ]] || die "mariadbd is not installed and this is not root: cannot apt-get"
  log "installing mariadb-server and mariadb-client"
  apt-get update
  DEBIAN_FRONTEND=noninteractive apt-get install -y mariadb-server mariadb-client
}

prepare_datadir() {
  mkdir -p /run/mysqld
  chown mysql:mysql /run/mysqld
  if [[ ! -d "$DATADIR/mysql" ]]; then
    log "initialising $DATADIR"
    mariadb-install-db --user=mysql --datadir="$DATADIR" >>"$LOG" 2>&1 \
      || die "mariadb-install-db failed; see $LOG"
  fi
}

start_server() {
  log "starting mariadbd (log: $LOG)"
  # setsid + nohup + every stream redirected: the server outlives this script and make,
  # and holds none of their file descriptors (a CI runner waits for those to close).
  setsid nohup mariadbd --user=mysql --bind-address="$HOST" --port="$PORT" \
    </dev/null >>"$LOG" 2>&1 &
  local pid=$! deadline=$((SECONDS + START_DEADLINE))
  until server_answers; do
    if ! kill -0 "$pid" 2>/dev/null; then
      tail -n 30 "$LOG" >&2 || true
      die "mariadbd exited during start-up"
    fi
    if ((SECONDS >= deadline)); then
      tail -n 30 "$LOG" >&2 || true
      die "mariadbd did not answer on $HOST:$PORT within ${START_DEADLINE}s"
    fi
    sleep 0.5
  done
  log "mariadbd answers on $HOST:$PORT"
}

# SQL literals below come from this script's own settings; refuse quotes rather than
# escape them.
setup_sql() {
  local user
  for value in "$DB_USER" "$DB_PASSWORD" "$DB_NAME"; do
    [[ "$value" != *[\'\\\`]* ]] || die "quotes and backslashes are not allowed in settings"
  done
  for user in "'$DB_USER'@'127.0.0.1'" "'$DB_USER'@'localhost'"; do
    echo "CREATE USER IF NOT EXISTS $user IDENTIFIED BY '$DB_PASSWORD';"
    echo "ALTER USER $user IDENTIFIED BY '$DB_PASSWORD';"
    # ALL ON *.* WITH GRANT OPTION: the tests create and drop a database of their own per
    # session, and some create accounts of their own (a password in a URL). A test-only
    # account on a loopback-only server.
    echo "GRANT ALL ON *.* TO $user WITH GRANT OPTION;"
  done
  echo "CREATE DATABASE IF NOT EXISTS \`$DB_NAME\` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;"
}

# On Debian root@localhost logs in through the unix socket as OS root; fall back to TCP
# root with an empty password (a server set up by hand or by a CI service container).
run_as_db_root() {
  local tool sql
  tool="$(client)"
  [[ -n "$tool" ]] || return 1
  sql="$(setup_sql)"
  # The SQL goes on stdin, so the password never shows in `ps`.
  if [[ "$(id -u)" == 0 ]] \
    && "$tool" --no-defaults -uroot --connect-timeout=5 <<<"$sql" 2>/dev/null; then
    return 0
  fi
  MYSQL_PWD="" "$tool" --no-defaults --protocol=TCP -h "$HOST" -P "$PORT" -uroot \
    --connect-timeout=5 <<<"$sql" 2>/dev/null
}

create_test_user() {
  if run_as_db_root; then
    log "user '$DB_USER' and database '$DB_NAME' are ready"
  elif test_login_works; then
    log "no root access, but '$DB_USER' already logs in to '$DB_NAME': keeping it"
  else
    die "cannot log in as root (socket or TCP) to create user '$DB_USER'"
  fi
  test_login_works || die "'$DB_USER' cannot log in to '$DB_NAME' on $HOST:$PORT over TCP"
}

main() {
  if ! server_answers; then
    install_packages
    if ! server_answers; then # the package's own post-install may have started one
      prepare_datadir
      start_server
    fi
  fi
  create_test_user
  echo "mysql://$DB_USER:$DB_PASSWORD@$HOST:$PORT/$DB_NAME"
}

main "$@"
