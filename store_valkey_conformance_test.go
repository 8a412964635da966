package writefence_test

import (
	"testing"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/writefencetest"
)

// TestValkeyConformance runs the conformance suite on both PutIfVersion
// paths. The suite works under random key prefixes of its own and deletes
// its keys through the store's Deleter.
func TestValkeyConformance(t *testing.T) {
	for _, path := range valkeyPaths {
		t.Run(path.name, func(t *testing.T) {
			store := writefence.NewValkeyConditionalStore(newValkeyClient(t))
			store.Script = path.script
			writefencetest.TestConditionalStore(t, func(*testing.T) writefence.ConditionalStore { return store })
		})
	}
}
