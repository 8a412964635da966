//go:build !writefence_nopostgres && !writefence_nosdk

package main

import (
	"net/url"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence/internal/sdkserver/postgres"
	"github.com/writefence/writefence/internal/testserver"
)

// TestPostgresAddress: postgres:// and postgresql:// open a PostgreSQL
// store, the address's user and pgx's parameters included; a password in
// the address, a bad table name or a bad parameter is a usage error that
// never echoes the secret.
func TestPostgresAddress(t *testing.T) {
	assertOpens(t, "*pgstore.Store", "postgres://h:1/db", "postgresql://role@h/db?table=ops.mirrors&sslmode=disable", "postgres://h/db?connect_timeout=5")
	assertRefusedSaying(t, map[string]string{
		"postgres://role:hunter2secret@h/db":     "credentials are not accepted",
		"postgres://h/db?password=hunter2secret": "credentials are not accepted",
		"postgres://h/db?table=bad-name":         "table",
		"postgres://h/db?table=a.b.c":            "table",
		"postgres://h/db?create=maybe":           "create=maybe",
		"postgres://h/db?sslmode=sometimes":      "sslmode",
	})
}

// postgresAddress returns the address of a table of the test's own on the
// PostgreSQL server (dropped afterwards), with the user in the address and
// the password in PGPASSWORD, and a pool of the server.
func postgresAddress(t *testing.T) (string, string) {
	t.Helper()
	u, err := url.Parse(testserver.PostgresURL(t))
	require.NoError(t, err)
	password, _ := u.User.Password()
	t.Setenv("PGPASSWORD", password)
	u.User = url.User(u.User.Username())
	pool := postgres.PostgresPool(t, testserver.PostgresURL(t), nil)
	table := postgres.PostgresTable(t, pool)
	q := u.Query()
	q.Set("table", table)
	u.RawQuery = q.Encode()
	return u.String(), password
}

// TestServerPostgres: create=true lets a command that writes create the
// table, and only such a command; then every subcommand, probe and race
// included, runs against it.
func TestServerPostgres(t *testing.T) {
	addr, _ := postgresAddress(t)
	table, _ := url.Parse(addr)
	r := wf(t, "latest", "-store", addr+"&create=true", "wal", "s")
	assert.Equal(t, exitError, r.code, "a read creates nothing: %s", r)
	assert.Contains(t, r.stderr, "writefence: table "+table.Query().Get("table")+" does not exist")
	assert.Contains(t, r.stderr, "to create it, run: writefence init -store ")
	r = wf(t, "push", "-store", addr, "-writer", "a", "-epoch", "1", "-file", writeFile(t, "x"), "wal", "s")
	assert.Equal(t, exitError, r.code, "without create=true a write creates nothing either: %s", r)

	r = wf(t, "probe", "-store", addr+"&create=true")
	require.Equal(t, exitOK, r.code, "%s", r)
	serverScenario(t, addr, "")
}

// TestServerPostgresCredentialsNeverPrinted: a wrong password is refused
// with the plain error status; the password appears in no output, and the
// variables read are named.
func TestServerPostgresCredentialsNeverPrinted(t *testing.T) {
	addr, password := postgresAddress(t)
	const wrong = "wrong-secret-d41d8cd9"
	t.Setenv("PGPASSWORD", wrong)
	r := wf(t, "latest", "-store", addr, "wal", "s")
	assert.Equal(t, exitError, r.code, "%s", r)
	assert.NotContains(t, r.stdout+r.stderr, wrong)
	assert.NotContains(t, r.stdout+r.stderr, password)
	assert.Contains(t, r.stderr, "PGPASSWORD (set)", "%s", r)
}
