package writefence_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence/azblobstore"
	"github.com/writefence/writefence/internal/testserver"
	"github.com/writefence/writefence/pgstore"
)

// The model (see runModel) on the stores of their own packages: Azure
// Blob on Azurite, damaged by raw overwrites, and PostgreSQL, damaged in
// place by UPDATEs of the data column that keep the version.

func TestModelAzblob(t *testing.T) {
	t.Parallel()
	runModel(t, func(t *testing.T) modelTarget {
		svc := testserver.AzuriteServer(t).Service(t, nil)
		c := svc.NewContainerClient(testserver.AzuriteContainer(t, svc))
		return modelTarget{name: "azblob", rewrites: true, store: azblobstore.New(c), damage: testserver.DamageAzblob(c)}
	})
}

func TestModelPostgres(t *testing.T) {
	t.Parallel()
	runModel(t, func(t *testing.T) modelTarget {
		pool := testserver.PostgresPool(t, testserver.PostgresURL(t), nil)
		table := testserver.PostgresTable(t, pool)
		s, err := pgstore.New(pool, table)
		require.NoError(t, err)
		require.NoError(t, s.CreateTable(t.Context()))
		return modelTarget{name: "postgres", store: s, damage: testserver.DamagePostgres(pool, table)}
	})
}
