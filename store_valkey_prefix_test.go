package writefence_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/keys"
)

func TestValkeyGetPrefix(t *testing.T) {
	for _, path := range valkeyPaths {
		t.Run(path.name, func(t *testing.T) {
			client, trips := benchValkey(t)
			wire := &valkeyByteCounter{}
			client.AddHook(wire)
			store := writefence.NewValkeyConditionalStore(client)
			store.Script = path.script
			var _ writefence.PrefixReader = store
			testPrefixAgreesWithGet(t, store)
			traffic := func() (int64, int64) { return trips.n.Load(), wire.n.Load() }
			if path.script {
				// The script checks the whole value on the server and
				// sends back the token, the size and the prefix: the
				// slack covers the token, RESP framing and the other
				// replies of a push.
				testPrefixFence(t, store, traffic, 1, 128)
			} else {
				// Without scripting the digest can only be checked on the
				// client: reads and writes transfer the whole value.
				testPrefixFenceWhole(t, store, traffic)
			}

			t.Run("too large", func(t *testing.T) {
				key := uniqueName(t)
				cleanupKey(t, store, key)
				_, err := store.PutIfVersion(t.Context(), key, make([]byte, 100), "")
				require.NoError(t, err)
				small := writefence.NewValkeyConditionalStore(client)
				small.Script = path.script
				small.MaxObjectSize = 99
				_, _, _, err = small.GetPrefix(t.Context(), key, 10)
				var tl *writefence.StoreError
				require.ErrorAs(t, err, &tl)
				assert.Contains(t, tl.Error(), fmt.Sprintf("more than %d bytes", 99))
			})

			t.Run("not this store's layout", func(t *testing.T) {
				key := uniqueName(t)
				cleanupKey(t, store, key)
				require.NoError(t, client.Set(t.Context(), key, "plain", 0).Err())
				_, _, _, err := store.GetPrefix(t.Context(), key, 10)
				require.ErrorIs(t, err, writefence.ErrCorrupt)
				assert.NotErrorIs(t, err, writefence.ErrNotFound)
				assert.NotErrorIs(t, err, writefence.ErrConflict)
			})
		})
	}
}

// testPrefixFenceWhole records what a cold push, a stale push and a steady
// push cost on the WATCH path over a 16 MiB record: each reads the whole
// value once (the read, or the write's own check), so a cold push reads it
// twice.
func testPrefixFenceWhole(t *testing.T, store writefence.ConditionalStore, traffic func() (trips, read int64)) {
	ctx := t.Context()
	prefix := uniqueName(t) + "/"
	key, err := keys.Shard(prefix, "wal", "0")
	require.NoError(t, err)
	cleanupKey(t, store, key)
	const size = 16 << 20
	big := benchPayload(size)
	fresh := func() *writefence.Fence { return &writefence.Fence{Store: store, Prefix: prefix} }
	require.NoError(t, fresh().Push(ctx, "wal", "0", "a", 1, big))
	measure := func(f func()) (int64, int64) {
		trips0, read0 := traffic()
		f()
		trips, read := traffic()
		return trips - trips0, read - read0
	}
	last := fresh()
	trips, read := measure(func() { require.NoError(t, last.Push(ctx, "wal", "0", "b", 2, big)) })
	t.Logf("cold push: %d round trips, %d bytes read", trips, read)
	assert.Equal(t, int64(3), trips, "cold push: one read, two for the write")
	assert.Greater(t, read, int64(2*size), "the read and the write's check each read the record")
	trips, read = measure(func() { require.NoError(t, last.Push(ctx, "wal", "0", "b", 3, big)) })
	t.Logf("steady push: %d round trips, %d bytes read", trips, read)
	assert.Equal(t, int64(2), trips, "steady push: the write alone")
	assert.Greater(t, read, int64(size), "the write's check reads the record")
	assert.Less(t, read, int64(2*size))
}
