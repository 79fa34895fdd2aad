// Command silo is the example Granary silo, the program the container
// image runs (deploy/). It hosts the Counter grain of the cluster example
// (package examples/cluster/counter) with its count as persistent state,
// in the storage provider its configuration chooses, and is configured
// entirely by package silo/host: flags, GRANARY_* environment variables
// or a YAML file. --help lists every setting.
//
// A silo alone, keeping its counts in ./data (the embedded store), with
// its gateway on port 30000 and its admin server on 8080:
//
//	go build -o silo ./examples/silo
//	./silo --log.format=console
//
// Then http://127.0.0.1:8080/ shows the dashboard, /readyz answers 200
// once the silo serves calls, and a client (package client) dials
// 127.0.0.1:30000. SIGTERM or Ctrl-C stops it gracefully; a second
// Ctrl-C exits at once.
//
// Three silos of one cluster on one machine, each in its own terminal,
// sharing their counts in PostgreSQL (a cluster's silos must share their
// storage; scripts/postgres-test.sh starts a local server), configured
// through the environment:
//
//	export GRANARY_CLUSTER_ID=demo GRANARY_STORAGE_PROVIDER=postgres \
//	  GRANARY_STORAGE_POSTGRES_DSN='postgres://granary:granary@127.0.0.1:5432/granary_test?sslmode=disable' \
//	  GRANARY_CLUSTER_SEEDS=127.0.0.1:7946,127.0.0.1:7956,127.0.0.1:7966 GRANARY_LOG_FORMAT=console
//	GRANARY_NAME=a GRANARY_CLUSTER_GOSSIP_LISTEN=127.0.0.1:7946 GRANARY_CLUSTER_GRPC_LISTEN=127.0.0.1:7947 \
//	  GRANARY_GATEWAY_LISTEN=127.0.0.1:30000 GRANARY_ADMIN_LISTEN=127.0.0.1:8080 ./silo
//	GRANARY_NAME=b GRANARY_CLUSTER_GOSSIP_LISTEN=127.0.0.1:7956 GRANARY_CLUSTER_GRPC_LISTEN=127.0.0.1:7957 \
//	  GRANARY_GATEWAY_LISTEN=127.0.0.1:30010 GRANARY_ADMIN_LISTEN=127.0.0.1:8081 ./silo
//	GRANARY_NAME=c GRANARY_CLUSTER_GOSSIP_LISTEN=127.0.0.1:7966 GRANARY_CLUSTER_GRPC_LISTEN=127.0.0.1:7967 \
//	  GRANARY_GATEWAY_LISTEN=127.0.0.1:30020 GRANARY_ADMIN_LISTEN=127.0.0.1:8082 ./silo
//
// or, the same with flags:
//
//	./silo --name=a --cluster.id=demo --cluster.gossip.listen=127.0.0.1:7946 --cluster.grpc.listen=127.0.0.1:7947 \
//	  --cluster.seeds=127.0.0.1:7946,127.0.0.1:7956,127.0.0.1:7966 --gateway.listen=127.0.0.1:30000 \
//	  --admin.listen=127.0.0.1:8080 --storage.provider=postgres --storage.postgres.dsn='postgres://...'
//
// Every silo lists all three as seeds, so they may start in any order.
// Any silo's dashboard shows the whole cluster; kill one and its counters
// activate again on the others at their next call, from their stored
// counts.
//
// The silo logs to standard error (JSON by default), among others
// "silo ready" with its addresses once it serves calls and "stopped" as
// its last line. It exits 0 after a graceful stop, 2 when its
// configuration is wrong (the error names the setting and where its value
// came from) and 1 when it fails.
package main

import (
	"github.com/granaryio/granary/examples/cluster/counter"
	"github.com/granaryio/granary/silo"
	"github.com/granaryio/granary/silo/host"
)

func main() {
	host.Main(register)
}

// register registers the grain types this silo hosts: the Counter, its
// count kept by the configured storage provider.
func register(s *silo.Silo) error {
	return counter.Register(s, true)
}
