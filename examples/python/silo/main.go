// Command silo is the silo that the Python client example
// (examples/python) calls: a silo alone hosting the hello.Greeter grain
// of package examples/python/greeter, configured like any other by
// package silo/host (flags, GRANARY_* environment variables or a YAML
// file; --help lists them).
//
// For the client, its gateway must listen and, to show authentication,
// take bearer tokens from a token file ("TOKEN PRINCIPAL" lines):
//
//	printf 'python-example-token python\n' > /tmp/tokens
//	GRANARY_GATEWAY_LISTEN=127.0.0.1:30000 GRANARY_GATEWAY_AUTH_TOKEN_FILE=/tmp/tokens \
//	  GRANARY_ADMIN_LISTEN= GRANARY_STORAGE_PROVIDER=memory GRANARY_LOG_FORMAT=console \
//	  go run ./examples/python/silo
//
// make python-example runs it so and calls it with client.py.
package main

import (
	"github.com/granaryio/granary/examples/python/greeter"
	"github.com/granaryio/granary/silo/host"
)

func main() {
	host.Main(greeter.Register)
}
