// Package postgres reaches the PostgreSQL server the PostgreSQL tests run
// against through pgx, beside package testserver, so that only the
// modules that test on PostgreSQL link pgx.
package postgres

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence/internal/testserver"
)

// PostgresPool returns a pool of connections to url, closed when the test
// ends. configure, when set, changes the pool's configuration first.
func PostgresPool(t testing.TB, url string, configure func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	if configure != nil {
		configure(cfg)
	}
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	return p
}

// PostgresTable returns a fresh table name of the test's own (which the
// test creates, e.g. with the store's CreateTable) and drops the table and
// its sequence, <name>_version, when the test ends.
func PostgresTable(t testing.TB, p *pgxpool.Pool) string {
	t.Helper()
	name := strings.ReplaceAll(testserver.UniqueName(t), "-", "_")
	t.Cleanup(func() {
		ctx, cancel := testserver.CleanupContext(t)
		defer cancel()
		for _, q := range []string{"DROP TABLE IF EXISTS ", "DROP SEQUENCE IF EXISTS "} {
			id := pgx.Identifier{name}
			if strings.HasPrefix(q, "DROP SEQUENCE") {
				id = pgx.Identifier{name + "_version"}
			}
			if _, err := p.Exec(ctx, q+id.Sanitize()); err != nil {
				t.Errorf("cleanup: %s%s: %v", q, name, err)
			}
		}
	})
	return name
}

// DamagePostgres damages rows of the pgstore table on p in place: the
// data column alone is rewritten, with one bit flipped or emptied, and the
// version and the digest are left as they were.
func DamagePostgres(p *pgxpool.Pool, table string) testserver.Damager {
	t := pgx.Identifier(strings.Split(table, ".")).Sanitize()
	return func(ctx context.Context, key string, f testserver.Fault) error {
		var data []byte
		if err := p.QueryRow(ctx, "SELECT data FROM "+t+" WHERE key = $1", key).Scan(&data); err != nil {
			return err
		}
		_, err := p.Exec(ctx, "UPDATE "+t+" SET data = $2 WHERE key = $1", key, f.Apply(data))
		return err
	}
}
