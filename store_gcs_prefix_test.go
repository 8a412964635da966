package writefence_test

import (
	"testing"

	"github.com/writefence/writefence"
)

func TestGCSGetPrefix(t *testing.T) {
	store, wire := countedGCSStore(t)
	var _ writefence.PrefixReader = store
	testPrefixAgreesWithGet(t, store)
	testPrefixFence(t, store, wire.traffic, 1, 0)

	testPrefixTooLarge(t, store, func(n int64) { store.MaxObjectSize = n })
}
