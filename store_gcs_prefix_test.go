package writefence_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
)

func TestGCSGetPrefix(t *testing.T) {
	store, wire := countedGCSStore(t)
	var _ writefence.PrefixReader = store
	testPrefixAgreesWithGet(t, store)
	testPrefixFence(t, store, wire.traffic, 1, 0)

	t.Run("too large", func(t *testing.T) {
		key := uniqueName(t)
		_, err := store.PutIfVersion(t.Context(), key, make([]byte, 100), "")
		require.NoError(t, err)
		store.MaxObjectSize = 99
		defer func() { store.MaxObjectSize = 0 }()
		_, _, _, err = store.GetPrefix(t.Context(), key, 10)
		var tl *writefence.TooLargeError
		require.ErrorAs(t, err, &tl)
		assert.Equal(t, int64(99), tl.Limit)
	})
}
