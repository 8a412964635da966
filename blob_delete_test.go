package writefence_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/fakestore"
)

// TestDeleteBlobs: DeleteBlobs deletes in one call of the store's
// BlobBatchDeleter when the store declares one, which reports a missing
// key deleted too; else with DeleteBlob of each key in turn, up to the
// first failure, returning the keys deleted before it and that failure.
// No keys is no call; a store that holds no blobs is unsupported.
func TestDeleteBlobs(t *testing.T) {
	ctx := t.Context()
	keys := []string{"b/1", "b/2", "b/3"}
	filled := func(t *testing.T) *writefence.MemStore {
		mem := &writefence.MemStore{}
		for _, k := range keys {
			_, err := mem.CreateBlob(ctx, k, strings.NewReader(k))
			require.NoError(t, err)
		}
		return mem
	}

	t.Run("batch", func(t *testing.T) {
		mem := filled(t)
		s := fakestore.New(mem, fakestore.Options{})
		deleted, err := writefence.DeleteBlobs(ctx, s, append(keys, "b/missing"))
		require.NoError(t, err)
		assert.ElementsMatch(t, append(keys, "b/missing"), deleted)
		assert.EqualValues(t, 1, s.Calls(fakestore.DeleteBlobs))
		assert.Zero(t, s.Calls(fakestore.DeleteBlob))
		assert.Empty(t, listBlobs(t, mem, ""))
	})
	t.Run("one by one", func(t *testing.T) {
		mem := filled(t)
		errDown := errors.New("down")
		s := fakestore.New(mem, fakestore.Options{Hide: fakestore.BlobBatchDeleter,
			Faults: []fakestore.Fault{{Op: fakestore.DeleteBlob, Key: "b/2", Err: errDown}}})
		deleted, err := writefence.DeleteBlobs(ctx, s, keys)
		require.ErrorIs(t, err, errDown)
		assert.Equal(t, []string{"b/1"}, deleted)
		assert.EqualValues(t, 2, s.Calls(fakestore.DeleteBlob), "none after the failure")
		assert.Zero(t, s.Calls(fakestore.DeleteBlobs))
		left := listBlobs(t, mem, "")
		assert.Len(t, left, 2)
		assert.Contains(t, left, "b/2")
		assert.Contains(t, left, "b/3")
	})
	t.Run("no keys", func(t *testing.T) {
		s := fakestore.New(filled(t), fakestore.Options{})
		deleted, err := writefence.DeleteBlobs(ctx, s, nil)
		require.NoError(t, err)
		assert.Empty(t, deleted)
		assert.Zero(t, s.Calls(fakestore.DeleteBlobs)+s.Calls(fakestore.DeleteBlob))
	})
	t.Run("no blobs", func(t *testing.T) {
		s := fakestore.New(&writefence.MemStore{}, fakestore.Options{Hide: fakestore.Declared})
		_, err := writefence.DeleteBlobs(ctx, s, keys)
		require.ErrorIs(t, err, errors.ErrUnsupported)
	})
}

// answeringDeleter is a MemStore whose BlobBatchDeleter deletes the keys
// it is given but keep does not, and answers with what answer makes of
// the keys it deleted, with no error: a store, or a server's reply, that
// answers for other keys than it was asked.
type answeringDeleter struct {
	*writefence.MemStore
	keep   string
	answer func(asked []string) []string
}

func (s *answeringDeleter) Capabilities() writefence.ConditionalStore { return s }

func (s *answeringDeleter) DeleteBlobs(ctx context.Context, keys []string) ([]string, error) {
	var gone []string
	for _, k := range keys {
		if k != s.keep {
			gone = append(gone, k)
		}
	}
	// Whatever ctx says, as a store that does not look.
	if _, err := s.MemStore.DeleteBlobs(context.WithoutCancel(ctx), gone); err != nil {
		return nil, err
	}
	return s.answer(gone), nil
}

// TestDeleteBlobsAnswersOnlyForKeysDeleted: whatever a store's
// BlobBatchDeleter answers, DeleteBlobs returns only keys it was given,
// each once, and an error naming a key left whenever it returns fewer
// than all (BlobBatchDeleter's contract): of an answer that names a key
// twice, one never asked, or leaves one out with no error.
func TestDeleteBlobsAnswersOnlyForKeysDeleted(t *testing.T) {
	keys := []string{"b/1", "b/2", "b/3"}
	for _, tt := range []struct {
		name   string
		keep   string
		answer func(asked []string) []string
		want   []string // what DeleteBlobs returns
	}{
		{"a key twice for another", "", func(a []string) []string { return []string{a[0], a[0], a[2]} }, []string{"b/1", "b/3"}},
		{"a key never asked for another", "", func(a []string) []string { return []string{a[0], "b/9", a[2]} }, []string{"b/1", "b/3"}},
		{"a key left out", "b/2", func(a []string) []string { return a }, []string{"b/1", "b/3"}},
		{"a key left, another twice", "b/2", func(a []string) []string { return append(a, a[0]) }, []string{"b/1", "b/3"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := t.Context()
			s := &answeringDeleter{MemStore: &writefence.MemStore{}, keep: tt.keep, answer: tt.answer}
			for _, k := range keys {
				_, err := s.CreateBlob(ctx, k, strings.NewReader(k))
				require.NoError(t, err)
			}
			deleted, err := writefence.DeleteBlobs(ctx, s, keys)
			assert.Equal(t, tt.want, deleted)
			var se *writefence.StoreError
			require.ErrorAs(t, err, &se, "a key is not accounted for")
			assert.Equal(t, "b/2", se.Key, "the key left")
		})
	}
	t.Run("a key left, ctx done", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		s := &answeringDeleter{MemStore: &writefence.MemStore{}, keep: "b/2", answer: func(a []string) []string { return a }}
		cancel()
		deleted, err := writefence.DeleteBlobs(ctx, s, keys)
		assert.Equal(t, []string{"b/1", "b/3"}, deleted)
		require.ErrorIs(t, err, context.Canceled)
		var se *writefence.StoreError
		assert.False(t, errors.As(err, &se), "ctx's error, untouched: %v", err)
	})
}

// TestCollectSaysWhatADeleteLeft: a store whose batch delete leaves a
// blob and answers for the others without an error fails the Collect,
// whose report lists only the blobs the store answered for.
func TestCollectSaysWhatADeleteLeft(t *testing.T) {
	ctx := t.Context()
	s := &answeringDeleter{MemStore: &writefence.MemStore{}, answer: func(a []string) []string { return a }}
	f := &writefence.Fence{Store: s}
	var dead []writefence.BlobRef
	for i := range 3 {
		dead = append(dead, putBlob(t, f, "a", 1, strconv.Itoa(i)))
	}
	require.NoError(t, f.Seal(ctx, "wal", "0", "b", 2))
	s.keep = blobKey(t, dead[1].Name)

	report, err := f.Collect(ctx, "wal", "0", writefence.GCOptions{Grace: time.Hour})
	require.ErrorContains(t, err, "1 of 3 blobs left")
	assert.Equal(t, sortedNames(dead[0], dead[2]), blobNames(report.Deleted))
	assert.Contains(t, listBlobs(t, s, ""), s.keep, "the blob left")
}
