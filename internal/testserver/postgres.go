package testserver

import "testing"

// PostgresURL returns the connection URL of the PostgreSQL server named by
// WRITEFENCE_POSTGRES_URL, a superuser's, password included.
func PostgresURL(t testing.TB) string { return Env(t, "WRITEFENCE_POSTGRES_URL") }
