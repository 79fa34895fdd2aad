package host

import (
	"fmt"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// "Logs and errors never show the password of storage.postgres.dsn",
// whatever form the DSN takes: among them a Unix-socket DSN (no host,
// libpq's usual form) and passwords holding '%' or '#', which a URL
// parser refuses.
func TestDSNPasswordNeverLogged(t *testing.T) {
	for _, dsn := range []string{
		"postgres://app:s3cretpw@/granary?host=/var/run/postgresql",
		"postgres://app:s3cret%pw@db:5432/granary",
		"postgres://app:s3cret#pw@db:5432/granary",
	} {
		t.Run(dsn, func(t *testing.T) {
			c, err := Load(nil, envOf(map[string]string{
				"GRANARY_CLUSTER_ID":           "c1",
				"GRANARY_STORAGE_PROVIDER":     "postgres",
				"GRANARY_STORAGE_POSTGRES_DSN": dsn,
			}))
			if err != nil {
				t.Fatal(err)
			}
			core, logs := observer.New(zap.DebugLevel)
			c.logLoaded(zap.New(core))
			for _, e := range logs.All() {
				text := e.Message + fmt.Sprint(e.ContextMap())
				if strings.Contains(text, "s3cret") {
					t.Errorf("the log %q shows the DSN's password: %s", e.Message, text)
				}
			}
		})
	}
}
