// Package deploy holds what runs Granary outside a Go program: the
// container image of the example silo (Dockerfile), a three-silo cluster
// for Docker Compose (compose.yaml) and the Kubernetes manifests (k8s/,
// applied with kubectl apply -k). docs/deploy.md is the operator's guide
// to them.
//
// The package has no code of its own. Its tests read the files and hold
// them to one contract, so that they cannot drift apart from each other
// or from the silo host's configuration:
//
//   - every file parses (the manifests as multi-document YAML);
//   - the image, the compose services and the Kubernetes pods expose the
//     same ports: gossip 7946 over TCP and UDP, silo gRPC 7947, the client
//     gateway 30000 and the admin server 8080;
//   - Kubernetes selectors match the pod labels, Services target named
//     container ports that exist, the gossip seed Service is headless and
//     publishes not-ready addresses, probes ask the admin port's /readyz
//     and /healthz, and the PodDisruptionBudget covers the pods;
//   - every GRANARY_* variable set is one the silo host reads, and the
//     grace period before a forced kill exceeds shutdown.timeout, in
//     compose and in Kubernetes alike;
//   - both run secured: mutual TLS between silos, TLS and a token file on
//     the gateway, TLS (mode tls, so probes need no certificate) and an
//     admin token file on the admin server, every file from a secret
//     mounted read-only (compose: the silo's own directory of make certs;
//     Kubernetes: a Secret volume, without the CA's key), the gossip key
//     from a Secret or an env file and never in the files, and probes over
//     HTTPS.
//
// The tests need neither Docker nor a Kubernetes cluster. make certs runs
// the program deploy/mksecrets, which makes the compose cluster's
// certificates (with granaryctl certs), tokens and gossip key in the
// git-ignored deploy/secrets. The chaos test that runs the compose
// cluster for real is the program deploy/e2e (make e2e).
package deploy
