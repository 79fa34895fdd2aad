// Package host runs a Granary silo the way production runs it: configured
// from a YAML file, the environment and flags, with structured logs, an
// admin HTTP server (health and readiness probes, Prometheus metrics, the
// admin API and dashboard), OpenTelemetry tracing, and a graceful stop on
// SIGTERM. A program hosts its grains in a few lines:
//
//	func main() {
//		host.Main(func(s *silo.Silo) error {
//			return bankpb.RegisterAccountGrain(s, newAccount)
//		})
//	}
//
// # Configuration
//
// Every setting has a dotted path, which is its key in the YAML file
// (nested mappings), its environment variable (GRANARY_ plus the path
// upper-cased with '.' as '_') and its flag (--path):
//
//	cluster:                    GRANARY_CLUSTER_SEEDS=a:7946,b:7946
//	  seeds: [a:7946, b:7946]   --cluster.seeds=a:7946,b:7946
//
// A flag wins over the environment, which wins over the file (named by
// --config or GRANARY_CONFIG), which wins over the default. Lists are
// comma-separated in the environment and flags, durations Go durations
// ("30s"), sizes whole numbers of bytes. An empty environment variable counts as unset, except for the
// settings whose empty value turns something off: GRANARY_ADMIN_LISTEN=,
// GRANARY_CLUSTER_ID= and GRANARY_GATEWAY_LISTEN= run no admin server, no
// cluster and no gateway. Config lists
// the settings and their defaults; --help prints them with their
// environment variables.
//
// The contract:
//
//   - Load reports every bad setting, each as a FieldError naming the
//     field and where its value came from: "(file silo.yaml line 7)",
//     "(env GRANARY_NAME)", "(flag --name)", "(default)" or, for a Config
//     built in code, "(set in code)". An unknown key in the file or an
//     unknown flag is an error naming it (and its line), with the nearest
//     known name.
//   - Logs and errors never show cluster.secret_key nor the password of
//     storage.postgres.dsn.
//   - Run opens the admin server before the silo joins its cluster, so
//     /healthz answers throughout a long join while /readyz says 503 and
//     why until the silo serves calls.
//   - Run stops the silo gracefully when its context ends (Main: the first
//     SIGTERM or SIGINT) or a drain request names the silo, within
//     shutdown.timeout; past it the silo is closed at once and Run
//     returns an error. Only then does it flush traces, stop the admin
//     server (which reports the silo shutting down until then) and close
//     storage. Run returns once everything it started has stopped.
//   - Main exits 0 after a clean stop, 2 on a configuration error and 1
//     on any other failure; a second signal exits at once.
package host
