package pgstore_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence/internal/modeltest"
	"github.com/writefence/writefence/internal/sdkserver/postgres"
	"github.com/writefence/writefence/internal/testserver"
	"github.com/writefence/writefence/pgstore"
)

// TestMain sets rapid's flags for the model test and checks for leaked
// goroutines (modeltest.Main).
func TestMain(m *testing.M) { modeltest.Main(m) }

// TestModel runs the model (internal/modeltest) on PostgreSQL, damaged in
// place by UPDATEs of the data column that keep the version.
func TestModel(t *testing.T) {
	t.Parallel()
	modeltest.Run(t, func(t *testing.T) modeltest.Target {
		pool := postgres.PostgresPool(t, testserver.PostgresURL(t), nil)
		table := postgres.PostgresTable(t, pool)
		s, err := pgstore.New(pool, table)
		require.NoError(t, err)
		require.NoError(t, s.CreateTable(t.Context()))
		return modeltest.Target{Name: "postgres", Store: s, Damage: postgres.DamagePostgres(pool, table)}
	})
}
