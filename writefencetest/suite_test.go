package writefencetest_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/testserver"
	"github.com/writefence/writefence/writefencetest"
)

// TestMemStore runs the suite on MemStore with every option: damage by
// overwrite, which is what damage is to a store whose every write gets a
// new version, and MemStore's read limit.
func TestMemStore(t *testing.T) {
	const limit = 2 << 20
	m := &writefence.MemStore{MaxObjectSize: limit}
	writefencetest.TestConditionalStore(t, func(*testing.T) writefence.ConditionalStore { return m },
		&writefencetest.Options{Damage: damageBy(testserver.DamageByOverwrite(m)), ReadLimit: limit})
}

// countingStore is a MemStore that counts the writes that landed, so a test
// can tell that the suite wrote something before checking it was removed.
// It declares its capabilities, so the suite creates blobs on it too.
type countingStore struct {
	*writefence.MemStore
	landed atomic.Int64
}

func (s *countingStore) Capabilities() writefence.ConditionalStore { return s }

func (s *countingStore) PutIfVersion(ctx context.Context, key string, data []byte, expect string) (string, error) {
	v, err := s.MemStore.PutIfVersion(ctx, key, data, expect)
	if err == nil {
		s.landed.Add(1)
	}
	return v, err
}

// TestSharedStoreIsCleanedUp runs the suite with one store for every
// subtest, as a store over a shared bucket would be, and checks that the
// subtests kept out of each other's way and deleted every key they wrote,
// the fence's record included, and every blob.
func TestSharedStoreIsCleanedUp(t *testing.T) {
	shared := &countingStore{MemStore: new(writefence.MemStore)}
	ok := t.Run("suite", func(t *testing.T) {
		// TestMemStore checks MemStore's blobs at the default part
		// size; here the small part keeps them small.
		writefencetest.TestConditionalStore(t, func(*testing.T) writefence.ConditionalStore { return shared },
			&writefencetest.Options{BlobPartSize: blobDoublePart})
	})
	require.True(t, ok, "the suite failed on a shared MemStore")
	require.GreaterOrEqual(t, shared.landed.Load(), int64(5*20), "fewer writes landed than the five races of 20 rounds alone make")
	require.Empty(t, testserver.Keys(t, shared), "keys left behind by the suite")
	var blobs []string
	require.NoError(t, shared.ListBlobs(t.Context(), "", func(b writefence.BlobInfo) error {
		blobs = append(blobs, b.Key)
		return nil
	}))
	require.Empty(t, blobs, "blobs left behind by the suite")
}

// withoutDelete hides MemStore's Delete, as a store without the optional
// capability would look.
type withoutDelete struct{ writefence.ConditionalStore }

// TestStoreWithoutDeleter checks that a store without writefence.Deleter
// passes, with the subtests that need a delete skipped, and that its keys
// are left under the suite's prefix.
func TestStoreWithoutDeleter(t *testing.T) {
	mem := new(writefence.MemStore)
	ok := t.Run("suite", func(t *testing.T) {
		writefencetest.TestConditionalStore(t, func(*testing.T) writefence.ConditionalStore {
			return withoutDelete{mem}
		}, nil)
	})
	require.True(t, ok, "the suite failed on a MemStore without Delete")
	keys := testserver.Keys(t, mem)
	require.NotEmpty(t, keys)
	for _, k := range keys {
		require.Regexp(t, `^writefencetest/[0-9a-f]{16}/`, k)
	}
}
