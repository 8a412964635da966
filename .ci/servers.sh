# Sourced by .ci/run and bench scripts: starts Valkey (a server, and a
# cluster of three primaries with a replica each), MinIO, fake-gcs-server,
# etcd, dynalite (DynamoDB), Azurite and PostgreSQL on 127.0.0.1, exports
# their addresses for the tests, and stops them (by PID) when the calling
# shell exits.

WF_SERVER_BIN=${WRITEFENCE_SERVER_BIN:-/var/cache/writefence-ci/bin}
WF_RUN_DIR=$(mktemp -d /tmp/writefence-servers.XXXXXX)
WF_PIDS=()

wf_stop_servers() {
  local pid
  for pid in "${WF_PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${WF_PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$WF_RUN_DIR"
}

# wf_free_port prints a port in 20000-32000 that nothing listens on.
wf_free_port() {
  local p
  while :; do
    p=$(( 20000 + RANDOM % 12000 ))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then echo "$p"; return; fi
  done
}

# wf_wait name pid command...: waits until command succeeds, failing early if
# the server process died.
wf_wait() {
  local name=$1 pid=$2; shift 2
  local i
  for i in $(seq 1 300); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "servers: $name exited during start-up; its log:" >&2
      cat "$WF_RUN_DIR/$name.log" >&2 || true
      return 1
    fi
    sleep 0.1
  done
  echo "servers: $name not ready after 30 s; its log:" >&2
  cat "$WF_RUN_DIR/$name.log" >&2 || true
  return 1
}

# wf_start_valkey_cluster starts a Valkey cluster of 3 primaries with one
# replica each, every node on a free client port and a free bus port of
# its own (the default bus port, client port + 10000, would fall in the
# ephemeral range), waits until every node reports cluster_state:ok and
# every primary counts its replica online, and exports the nodes'
# addresses, comma-separated, as WRITEFENCE_VALKEY_CLUSTER.
wf_start_valkey_cluster() {
  local ports=() pids=() addrs=() p bus i
  for i in 1 2 3 4 5 6; do
    p=$(wf_free_port); bus=$(wf_free_port)
    while [ "$bus" = "$p" ]; do bus=$(wf_free_port); done
    mkdir -p "$WF_RUN_DIR/cluster-$p"
    valkey-server --bind 127.0.0.1 --port "$p" --cluster-enabled yes --cluster-port "$bus" \
      --cluster-config-file "nodes-$p.conf" --dir "$WF_RUN_DIR/cluster-$p" \
      --save '' --appendonly no --repl-diskless-sync-delay 0 --daemonize no \
      >"$WF_RUN_DIR/valkey-cluster-$p.log" 2>&1 &
    WF_PIDS+=($!); pids+=($!)
    wf_wait "valkey-cluster-$p" $! valkey-cli -p "$p" ping || return 1
    ports+=("$p"); addrs+=("127.0.0.1:$p")
  done
  valkey-cli --cluster create "${addrs[@]}" --cluster-replicas 1 --cluster-yes \
    >"$WF_RUN_DIR/valkey-cluster-create.log" 2>&1 || {
    echo "servers: valkey-cli --cluster create failed:" >&2
    cat "$WF_RUN_DIR/valkey-cluster-create.log" >&2
    return 1
  }
  for i in "${!ports[@]}"; do
    wf_wait "valkey-cluster-${ports[$i]}" "${pids[$i]}" wf_cluster_ready "${ports[$i]}" || return 1
  done
  export WRITEFENCE_VALKEY_CLUSTER=$(IFS=,; echo "${addrs[*]}")
}

# wf_cluster_ready port: the node reports cluster_state:ok and, if it is a
# primary, counts a replica online.
wf_cluster_ready() {
  valkey-cli -p "$1" cluster info | grep -q '^cluster_state:ok' || return 1
  local info
  info=$(valkey-cli -p "$1" info replication)
  case "$info" in
    *role:master*) grep -q 'slave0:.*state=online' <<<"$info" ;;
    *) grep -q 'master_link_status:up' <<<"$info" ;;
  esac
}

wf_start_servers() {
  local p p2
  p=$(wf_free_port)
  valkey-server --bind 127.0.0.1 --port "$p" --save '' --appendonly no --daemonize no \
    >"$WF_RUN_DIR/valkey.log" 2>&1 &
  WF_PIDS+=($!)
  wf_wait valkey $! valkey-cli -p "$p" ping || return 1
  export WRITEFENCE_VALKEY_ADDR=127.0.0.1:$p

  wf_start_valkey_cluster || return 1

  p=$(wf_free_port); p2=$(wf_free_port)
  mkdir -p "$WF_RUN_DIR/minio"
  MINIO_ROOT_USER=writefence MINIO_ROOT_PASSWORD=writefence-secret MINIO_BROWSER=off MINIO_UPDATE=off \
    "$WF_SERVER_BIN/minio" server "$WF_RUN_DIR/minio" --address "127.0.0.1:$p" \
    --console-address "127.0.0.1:$p2" --quiet >"$WF_RUN_DIR/minio.log" 2>&1 &
  WF_PIDS+=($!)
  wf_wait minio $! curl -sf "http://127.0.0.1:$p/minio/health/ready" || return 1
  export WRITEFENCE_S3_ENDPOINT=127.0.0.1:$p
  export WRITEFENCE_S3_ACCESS_KEY=writefence
  export WRITEFENCE_S3_SECRET_KEY=writefence-secret

  p=$(wf_free_port)
  "$WF_SERVER_BIN/fake-gcs-server" -scheme http -host 127.0.0.1 -port "$p" \
    -public-host "127.0.0.1:$p" -backend memory >"$WF_RUN_DIR/fake-gcs.log" 2>&1 &
  WF_PIDS+=($!)
  wf_wait fake-gcs $! curl -sf "http://127.0.0.1:$p/storage/v1/b" || return 1
  export WRITEFENCE_GCS_ENDPOINT=http://127.0.0.1:$p

  wf_start_etcd || return 1
  wf_start_dynalite || return 1
  wf_start_azurite || return 1
  wf_start_postgres || return 1

  # With this set, a test whose server address is missing fails instead of
  # skipping.
  export WRITEFENCE_REQUIRE_SERVERS=1
  echo "servers: valkey $WRITEFENCE_VALKEY_ADDR, valkey cluster $WRITEFENCE_VALKEY_CLUSTER, minio $WRITEFENCE_S3_ENDPOINT, fake-gcs $WRITEFENCE_GCS_ENDPOINT"
  echo "servers: etcd $WRITEFENCE_ETCD_ENDPOINT, dynalite $WRITEFENCE_DYNAMODB_ENDPOINT"
}

# wf_start_etcd starts a one-member etcd (Debian's etcd-server) for the
# etcdstore tests; its data lives under the run directory, removed at stop.
wf_start_etcd() {
  local p p2
  p=$(wf_free_port); p2=$(wf_free_port)
  while [ "$p2" = "$p" ]; do p2=$(wf_free_port); done
  etcd --name wf --data-dir "$WF_RUN_DIR/etcd" \
    --listen-client-urls "http://127.0.0.1:$p" --advertise-client-urls "http://127.0.0.1:$p" \
    --listen-peer-urls "http://127.0.0.1:$p2" --initial-advertise-peer-urls "http://127.0.0.1:$p2" \
    --initial-cluster "wf=http://127.0.0.1:$p2" --initial-cluster-state new \
    --logger zap --log-level error >"$WF_RUN_DIR/etcd.log" 2>&1 &
  WF_PIDS+=($!)
  wf_wait etcd $! curl -sf "http://127.0.0.1:$p/health" || return 1
  export WRITEFENCE_ETCD_ENDPOINT=http://127.0.0.1:$p
}

# wf_start_dynalite starts dynalite (DynamoDB's API over an in-memory
# LevelDB) for the dynamostore tests. Tables become ACTIVE at once. It
# answers any POST, with an error for one that names no operation.
wf_start_dynalite() {
  local p
  p=$(wf_free_port)
  node "$(dirname "$WF_SERVER_BIN")/npm/dynalite-4.0.0/node_modules/dynalite/cli.js" \
    --host 127.0.0.1 --port "$p" --createTableMs 0 --deleteTableMs 0 --updateTableMs 0 \
    >"$WF_RUN_DIR/dynalite.log" 2>&1 &
  WF_PIDS+=($!)
  wf_wait dynalite $! curl -s -o /dev/null -X POST "http://127.0.0.1:$p/" || return 1
  export WRITEFENCE_DYNAMODB_ENDPOINT=http://127.0.0.1:$p
}

# wf_start_azurite starts Azurite's blob service (installed by
# .ci/install-servers under $WF_SERVER_BIN's parent) and exports its
# endpoint and the well-known development account's name and key.
wf_start_azurite() {
  local p bin
  bin=$(dirname "$WF_SERVER_BIN")/npm/azurite-3.37.0/node_modules/.bin/azurite-blob
  p=$(wf_free_port)
  mkdir -p "$WF_RUN_DIR/azurite"
  "$bin" --blobHost 127.0.0.1 --blobPort "$p" --location "$WF_RUN_DIR/azurite" \
    --silent --skipApiVersionCheck --disableTelemetry >"$WF_RUN_DIR/azurite.log" 2>&1 &
  WF_PIDS+=($!)
  # Any HTTP answer will do: an anonymous request is refused.
  wf_wait azurite $! curl -s -o /dev/null "http://127.0.0.1:$p/" || return 1
  export WRITEFENCE_AZURITE_ENDPOINT=http://127.0.0.1:$p/devstoreaccount1
  export WRITEFENCE_AZURITE_ACCOUNT=devstoreaccount1
  export WRITEFENCE_AZURITE_KEY='Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=='
  echo "servers: azurite $WRITEFENCE_AZURITE_ENDPOINT"
}

# wf_start_postgres creates a database cluster of its own and starts
# PostgreSQL on it, listening on 127.0.0.1 only. initdb and the server
# refuse to run as root, so both run as the postgres user, in a directory
# that user owns. Connections over TCP authenticate with a password
# (scram-sha-256), so the tests can see a login refused.
wf_start_postgres() {
  local p bin dir
  bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
  p=$(wf_free_port)
  dir=$WF_RUN_DIR/postgres
  mkdir -p "$dir"
  chmod 711 "$WF_RUN_DIR" # the postgres user must reach its directory, and only that
  echo writefence-secret > "$dir/pwfile"
  chown -R postgres: "$dir"
  runuser -u postgres -- "$bin/initdb" -D "$dir/data" -U postgres --pwfile "$dir/pwfile" \
    --auth-host scram-sha-256 --auth-local trust -E UTF8 --locale C >"$WF_RUN_DIR/postgres-initdb.log" 2>&1 || {
    echo "servers: initdb failed; its log:" >&2; cat "$WF_RUN_DIR/postgres-initdb.log" >&2; return 1; }
  # fsync off: a test server need not survive a crash of this machine, and
  # the tests run faster on a loaded disk.
  runuser -u postgres -- "$bin/postgres" -D "$dir/data" -h 127.0.0.1 -p "$p" -k "$dir" \
    -c fsync=off -c max_connections=200 >"$WF_RUN_DIR/postgres.log" 2>&1 &
  WF_PIDS+=($!)
  wf_wait postgres $! "$bin/pg_isready" -q -h 127.0.0.1 -p "$p" || return 1
  export WRITEFENCE_POSTGRES_URL="postgres://postgres:writefence-secret@127.0.0.1:$p/postgres?sslmode=disable"
  echo "servers: postgres 127.0.0.1:$p"
}
