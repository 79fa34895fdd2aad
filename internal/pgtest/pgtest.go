// Package pgtest gives tests the PostgreSQL server they run against: the
// one GRANARY_TEST_POSTGRES_DSN names. Without one, the tests that need it
// skip, saying how to start one, or fail when
// GRANARY_TEST_POSTGRES_REQUIRED=1 (as in CI, where skipping would hide
// them).
//
// A local server for the tests:
//
//	make postgres-up    # or scripts/postgres-test.sh up; prints the DSN last
//	export GRANARY_TEST_POSTGRES_DSN='postgres://granary:granary@127.0.0.1:5432/granary_test?sslmode=disable'
//	go test ./silo/storage/pgstore/
//	make postgres-down
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// The environment variables that configure the tests.
const (
	// EnvDSN names the server, as a libpq URL or key=value string. Its
	// role needs CREATEDB for the tests that make a database of their own.
	EnvDSN = "GRANARY_TEST_POSTGRES_DSN"
	// EnvRequired, set to 1, fails the tests that need a server when
	// there is none, rather than skip them.
	EnvRequired = "GRANARY_TEST_POSTGRES_REQUIRED"
)

// pingTimeout bounds the check that the server answers.
const pingTimeout = 5 * time.Second

const howToRun = "to run these tests, start a local server with `make postgres-up` " +
	"(scripts/postgres-test.sh up) and export the DSN it prints on its last line as " + EnvDSN +
	", or set " + EnvDSN + " to the DSN of any server whose role has CREATEDB"

var (
	mu      sync.Mutex
	checked = map[string]error{} // by DSN: whether the server answered
)

// DSN returns the DSN of the test server, once it has answered a ping in
// this process. Without a server it skips t, or fails it when
// GRANARY_TEST_POSTGRES_REQUIRED=1.
func DSN(t testing.TB) string {
	t.Helper()
	dsn := os.Getenv(EnvDSN)
	if dsn == "" {
		unavailable(t, EnvDSN+" is not set")
		return ""
	}
	mu.Lock()
	err, ok := checked[dsn]
	if !ok {
		err = ping(dsn)
		checked[dsn] = err
	}
	mu.Unlock()
	if err != nil {
		unavailable(t, fmt.Sprintf("the server %s names does not answer: %v", EnvDSN, err))
		return ""
	}
	return dsn
}

func unavailable(t testing.TB, reason string) {
	t.Helper()
	if os.Getenv(EnvRequired) == "1" {
		t.Fatalf("pgtest: no PostgreSQL server, and %s=1: %s; %s", EnvRequired, reason, howToRun)
	}
	t.Skipf("pgtest: no PostgreSQL server: %s; %s (%s=1 fails rather than skips)", reason, howToRun, EnvRequired)
}

// ping connects to dsn and pings the server, within pingTimeout.
func ping(dsn string) error {
	ctx, cancel := context.WithTimeout(context.Background(), pingTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	return conn.Ping(ctx)
}

// ServiceID returns a service ID no other test uses, from t's name and a
// random suffix, so that tests sharing the database never see each
// other's rows.
func ServiceID(t testing.TB) string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return t.Name() + "-" + hex.EncodeToString(b[:])
}
