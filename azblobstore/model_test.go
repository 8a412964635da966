package azblobstore_test

import (
	"testing"

	"github.com/writefence/writefence/azblobstore"
	"github.com/writefence/writefence/internal/modeltest"
	"github.com/writefence/writefence/internal/sdkserver/azurite"
)

// TestMain sets rapid's flags for the model test and checks for leaked
// goroutines (modeltest.Main).
func TestMain(m *testing.M) { modeltest.Main(m) }

// TestModel runs the model (internal/modeltest) on Azure Blob on
// Azurite, damaged by raw overwrites.
func TestModel(t *testing.T) {
	t.Parallel()
	modeltest.Run(t, func(t *testing.T) modeltest.Target {
		svc := azurite.AzuriteServer(t).Service(t, nil)
		c := svc.NewContainerClient(azurite.AzuriteContainer(t, svc))
		return modeltest.Target{Name: "azblob", Rewrites: true, Store: azblobstore.New(c), Damage: azurite.DamageAzblob(c)}
	})
}
