#!/usr/bin/env bash
# Runs a local PostgreSQL server for the tests of the PostgreSQL storage
# provider (silo/storage/pgstore), on Debian or Ubuntu.
#
#   scripts/postgres-test.sh up     install the server if missing, start it,
#                                   create role and database granary_test,
#                                   and print the DSN on the last line
#   scripts/postgres-test.sh up --docker
#                                   the same, and let Docker containers in:
#                                   listen on the Docker bridge's gateway
#                                   address too (what host.docker.internal
#                                   names in a container started with
#                                   --add-host host.docker.internal:host-gateway)
#                                   and allow role granary from the Docker
#                                   address pools in pg_hba.conf
#   scripts/postgres-test.sh down   stop the server
#
# --docker is what make cluster-up and make e2e use (deploy/compose.yaml).
# It writes conf.d/granary-docker.conf and a marked block of pg_hba.conf,
# restarting the server when they change; without it, up changes neither.
# DOCKER_SUBNETS overrides the address pools allowed (default Docker's:
# "172.16.0.0/12 192.168.0.0/16"), for a daemon with default-address-pools
# of its own.
#
# Then run the tests with the DSN, for example:
#
#   export GRANARY_TEST_POSTGRES_DSN=$(scripts/postgres-test.sh up | tail -n1)
#   go test -race ./silo/storage/pgstore/
#
# Progress goes to stderr, the DSN alone to stdout. Needs root, or sudo.
set -euo pipefail

PORT=5432
ROLE=granary
PASSWORD=granary
DATABASE=granary_test
DSN="postgres://$ROLE:$PASSWORD@127.0.0.1:$PORT/$DATABASE?sslmode=disable"
READY_TIMEOUT=60 # seconds
DOCKER_SUBNETS=${DOCKER_SUBNETS:-172.16.0.0/12 192.168.0.0/16}
DOCKER_CONF=granary-docker.conf         # under the cluster's conf.d
HBA_BEGIN='# granary-docker begin: written by postgres-test.sh up --docker'
HBA_END='# granary-docker end'

# A locale that every Debian has: the package's postinst and
# pg_createcluster fail under a LANG or LC_ALL naming one not generated.
export LC_ALL=C.UTF-8 LANG=C.UTF-8

log() { echo "postgres-test: $*" >&2; }
die() { log "$*"; exit 1; }

# as_root runs a command as root: directly when we are root, else by sudo.
as_root() {
	if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

# as_postgres runs a command as the postgres user, from / so that it does
# not complain about a home directory it cannot enter.
as_postgres() {
	if [ "$(id -u)" -eq 0 ]; then
		(cd / && runuser -u postgres -- "$@")
	else
		(cd / && sudo -u postgres -- "$@")
	fi
}

# psql_admin runs an SQL command as the superuser postgres, over the socket.
psql_admin() {
	as_postgres psql -p "$PORT" -X -q -v ON_ERROR_STOP=1 -tA -c "$1"
}

# server_installed: pg_ctlcluster and some version's server binary exist.
server_installed() {
	command -v pg_ctlcluster >/dev/null 2>&1 || return 1
	compgen -G '/usr/lib/postgresql/*/bin/postgres' >/dev/null
}

install_server() {
	log "installing PostgreSQL (apt-get)"
	as_root apt-get update >&2
	as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y postgresql >&2
	server_installed || die "PostgreSQL installed, but pg_ctlcluster or the server binary is still missing"
}

# cluster_on_port prints "version name status" of the cluster on $PORT, if any.
cluster_on_port() {
	pg_lsclusters --no-header | awk -v port="$PORT" '$3 == port { print $1, $2, $4; exit }'
}

# newest_version prints the newest installed server version.
newest_version() {
	local dir
	dir=$(compgen -G '/usr/lib/postgresql/*/bin/postgres' | sort -V | tail -n1)
	dir=${dir%/bin/postgres}
	echo "${dir##*/}"
}

# wait_ready waits until the server accepts connections at host ${1:-127.0.0.1}.
wait_ready() {
	local host=${1:-127.0.0.1} i
	for ((i = 0; i < READY_TIMEOUT; i++)); do
		if pg_isready -q -h "$host" -p "$PORT" -t 1; then
			return 0
		fi
		sleep 1
	done
	die "the server on $host:$PORT is not accepting connections after ${READY_TIMEOUT}s"
}

# docker_gateway prints the IPv4 gateway of Docker's default bridge: the
# address host-gateway stands for in a container's /etc/hosts.
docker_gateway() {
	local gw=""
	if command -v docker >/dev/null 2>&1; then
		gw=$(docker network inspect bridge -f '{{range .IPAM.Config}}{{.Gateway}} {{end}}' 2>/dev/null | tr ' ' '\n' | grep -m1 -E '^[0-9]+(\.[0-9]+){3}$' || true)
	fi
	if [ -z "$gw" ] && command -v ip >/dev/null 2>&1; then
		gw=$(ip -4 -o addr show dev docker0 2>/dev/null | awk '{ split($4, a, "/"); print a[1]; exit }')
	fi
	[ -n "$gw" ] || die "--docker: found no Docker bridge address (is Docker running? docker network inspect bridge, ip addr show docker0)"
	echo "$gw"
}

# allow_docker makes cluster $1/$2 listen on the Docker bridge's gateway
# too and lets role $ROLE in from $DOCKER_SUBNETS, restarting the server
# when that changes its configuration.
allow_docker() {
	local version=$1 name=$2 gw conf hba block current changed=0
	gw=$(docker_gateway)
	conf=/etc/postgresql/$version/$name/conf.d/$DOCKER_CONF
	block="listen_addresses = 'localhost,$gw'"
	current=$(as_root cat "$conf" 2>/dev/null || true)
	if [ "$current" != "$block" ]; then
		log "listening on $gw too ($conf)"
		as_root mkdir -p "$(dirname "$conf")"
		printf '%s\n' "$block" | as_root tee "$conf" >/dev/null
		changed=1
	fi
	hba=$(psql_admin "SHOW hba_file")
	block=$HBA_BEGIN
	local net
	for net in $DOCKER_SUBNETS; do
		block+=$'\n'"host    all             $ROLE         $net          scram-sha-256"
	done
	block+=$'\n'"$HBA_END"
	current=$(as_root awk -v b="$HBA_BEGIN" -v e="$HBA_END" '$0 == b { on = 1 } on { print } $0 == e { on = 0 }' "$hba")
	if [ "$current" != "$block" ]; then
		log "allowing $ROLE from $DOCKER_SUBNETS ($hba)"
		local rest
		rest=$(as_root awk -v b="$HBA_BEGIN" -v e="$HBA_END" '$0 == b { skip = 1 } !skip { print } $0 == e { skip = 0 }' "$hba")
		printf '%s\n%s\n' "$rest" "$block" | as_root tee "$hba" >/dev/null
		changed=1
	fi
	if [ "$changed" -eq 1 ]; then
		log "restarting cluster $version/$name"
		as_root pg_ctlcluster "$version" "$name" restart >&2
		wait_ready
	fi
	wait_ready "$gw"
	log "containers reach it at host.docker.internal:$PORT (mapped to $gw)"
}

up() {
	local docker=0
	case "${1:-}" in
	"") ;;
	--docker) docker=1 ;;
	*) die "up: unknown option $1 (want --docker or nothing)" ;;
	esac
	server_installed || install_server
	local cluster version name status
	cluster=$(cluster_on_port)
	if [ -z "$cluster" ]; then
		version=$(newest_version)
		name=main
		if pg_lsclusters --no-header | awk -v v="$version" '$1 == v && $2 == "main" { found = 1 } END { exit !found }'; then
			name=granary # main exists, on another port
		fi
		log "creating cluster $version/$name on port $PORT"
		as_root pg_createcluster --port "$PORT" "$version" "$name" >&2
		cluster=$(cluster_on_port)
		[ -n "$cluster" ] || die "pg_createcluster made no cluster on port $PORT"
	fi
	read -r version name status <<<"$cluster"
	if [[ $status == online* ]]; then
		log "cluster $version/$name is already running on port $PORT"
	else
		log "starting cluster $version/$name on port $PORT"
		as_root pg_ctlcluster "$version" "$name" start >&2
	fi
	wait_ready

	if [ "$(psql_admin "SELECT 1 FROM pg_roles WHERE rolname = '$ROLE'")" != 1 ]; then
		log "creating role $ROLE"
		psql_admin "CREATE ROLE $ROLE LOGIN CREATEDB PASSWORD '$PASSWORD'"
	else
		psql_admin "ALTER ROLE $ROLE LOGIN CREATEDB PASSWORD '$PASSWORD'"
	fi
	if [ "$(psql_admin "SELECT 1 FROM pg_database WHERE datname = '$DATABASE'")" != 1 ]; then
		log "creating database $DATABASE"
		psql_admin "CREATE DATABASE $DATABASE OWNER $ROLE"
	fi
	if [ "$docker" -eq 1 ]; then
		allow_docker "$version" "$name"
	fi
	log "ready; export GRANARY_TEST_POSTGRES_DSN='$DSN'"
	echo "$DSN"
}

down() {
	command -v pg_lsclusters >/dev/null 2>&1 || { log "PostgreSQL is not installed"; return 0; }
	local cluster version name status
	cluster=$(cluster_on_port)
	if [ -z "$cluster" ]; then
		log "no cluster on port $PORT"
		return 0
	fi
	read -r version name status <<<"$cluster"
	if [[ $status == online* ]]; then
		log "stopping cluster $version/$name"
		as_root pg_ctlcluster "$version" "$name" stop >&2
	else
		log "cluster $version/$name is not running"
	fi
}

case "${1:-}" in
up) up "${2:-}" ;;
down) down ;;
*)
	echo "usage: $0 up [--docker] | down" >&2
	exit 2
	;;
esac
