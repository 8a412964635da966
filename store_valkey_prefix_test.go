package writefence_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
)

func TestValkeyGetPrefix(t *testing.T) {
	client, trips := benchValkey(t)
	store := writefence.NewValkeyConditionalStore(client)
	var _ writefence.PrefixReader = store
	testPrefixAgreesWithGet(t, store)
	// A WATCH-path write is two round trips and reads the current token;
	// every read returns the token before the data.
	testPrefixFence(t, store, trips.traffic, 2, 32)

	t.Run("too large", func(t *testing.T) {
		key := uniqueName(t)
		cleanupKey(t, store, key)
		_, err := store.PutIfVersion(t.Context(), key, make([]byte, 100), "")
		require.NoError(t, err)
		small := writefence.NewValkeyConditionalStore(client)
		small.MaxObjectSize = 99
		_, _, _, err = small.GetPrefix(t.Context(), key, 10)
		var tl *writefence.TooLargeError
		require.ErrorAs(t, err, &tl)
		assert.Equal(t, int64(99), tl.Limit)
	})

	t.Run("not this store's layout", func(t *testing.T) {
		key := uniqueName(t)
		cleanupKey(t, store, key)
		require.NoError(t, client.Set(t.Context(), key, "plain", 0).Err())
		_, _, _, err := store.GetPrefix(t.Context(), key, 10)
		require.Error(t, err)
		assert.NotErrorIs(t, err, writefence.ErrNotFound)
		assert.NotErrorIs(t, err, writefence.ErrConflict)
	})
}
