//go:build (!writefence_nominio || !writefence_nogcs) && !writefence_nosdk

package writefence_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/pushrace"
	"github.com/writefence/writefence/internal/testserver"
)

// The checks the object-store adapters (S3, GCS) run on their servers.

// testProtocol walks store through the answers an adapter classifies, on
// key "k" of a bucket of the test's own: a read of a missing key, an update
// of it with madeUp (a well-formed token no write returned), a create, a
// second create, an update and a stale one, and deletes. extra runs after
// the writes with the versions of the two that landed and the error of the
// second create; any write it makes must be refused, because the walk then
// checks that the key holds the update.
func testProtocol(t *testing.T, store interface {
	writefence.ConditionalStore
	writefence.Deleter
}, madeUp string, extra func(v1, v2 string, createErr error)) {
	ctx := t.Context()
	_, _, err := store.Get(ctx, "k")
	require.ErrorIs(t, err, writefence.ErrNotFound)

	_, err = store.PutIfVersion(ctx, "k", []byte("one"), madeUp)
	require.ErrorIs(t, err, writefence.ErrConflict, "an update of a missing key")
	_, _, err = store.Get(ctx, "k")
	require.ErrorIs(t, err, writefence.ErrNotFound, "an update of a missing key must not create it")

	v1, err := store.PutIfVersion(ctx, "k", []byte("one"), "")
	require.NoError(t, err)
	data, v, err := store.Get(ctx, "k")
	require.NoError(t, err)
	assert.Equal(t, "one", string(data))
	assert.Equal(t, v1, v)

	_, createErr := store.PutIfVersion(ctx, "k", []byte("other"), "")
	require.ErrorIs(t, createErr, writefence.ErrConflict, "create-only on an existing key")

	v2, err := store.PutIfVersion(ctx, "k", []byte("two"), v1)
	require.NoError(t, err)
	assert.NotEqual(t, v1, v2)
	_, err = store.PutIfVersion(ctx, "k", []byte("three"), v1)
	require.ErrorIs(t, err, writefence.ErrConflict, "stale update")

	extra(v1, v2, createErr)
	data, v, err = store.Get(ctx, "k")
	require.NoError(t, err)
	assert.Equal(t, "two", string(data), "no refused write landed")
	assert.Equal(t, v2, v)

	require.NoError(t, store.Delete(ctx, "k"))
	require.NoError(t, store.Delete(ctx, "k"), "deleting a missing key is not an error")
	_, _, err = store.Get(ctx, "k")
	require.ErrorIs(t, err, writefence.ErrNotFound)
}

// testFenceRace races 16 writers, each with a Fence of its own, over 50
// rounds at one epoch a round (writefencetest.RacePush: every writer has
// read the record before any of them writes): in every round exactly one
// push lands, every other is refused as stale, and the record is the
// winner's.
func testFenceRace(t *testing.T, store writefence.ConditionalStore) {
	const writers, rounds = 16, 50
	results, err := pushrace.Run(t.Context(), store, pushrace.Race{
		Writers: writers, Rounds: rounds,
		Prefix: testserver.UniqueName(t) + "/", Plugin: "race", Shard: "shard",
	})
	require.NoError(t, err)
	require.Len(t, results, rounds)
	stale := 0
	for _, r := range results {
		assert.Empty(t, r.Errors, "round %d", r.Round)
		assert.Empty(t, r.Violations, "round %d", r.Round)
		assert.Len(t, r.Winners, 1, "round %d: winners", r.Round)
		stale += r.Stale
	}
	t.Logf("%d rounds of %d writers: %d pushes refused as stale", rounds, writers, stale)
	assert.Equal(t, rounds*(writers-1), stale)
}

// testPrefixTooLarge: GetPrefix of an object over the store's read limit
// is refused with ErrTooLarge, as Get would be. setLimit sets the limit of
// store.
func testPrefixTooLarge(t *testing.T, store prefixStoreUnderTest, setLimit func(int64)) {
	t.Run("too large", func(t *testing.T) {
		key := testserver.UniqueName(t)
		_, err := store.PutIfVersion(t.Context(), key, make([]byte, 100), "")
		require.NoError(t, err)
		setLimit(99)
		defer setLimit(0)
		_, _, _, err = store.GetPrefix(t.Context(), key, 10)
		requireTooLarge(t, err, key, 99)
	})
}

// requireTooLarge checks that err refuses a read of key, an object over
// limit bytes: it matches ErrTooLarge and is a *StoreError that names key
// and limit.
func requireTooLarge(t *testing.T, err error, key string, limit int64) {
	t.Helper()
	require.ErrorIs(t, err, writefence.ErrTooLarge)
	var se *writefence.StoreError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, key, se.Key)
	assert.ErrorContains(t, err, fmt.Sprintf("object too large: more than %d bytes", limit))
}
