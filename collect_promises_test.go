package writefence_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
)

// TestPromise24_CollectOfBlobsWithoutCreationTime: on a blob store that
// gives no creation time (the zero time, as Collect's documentation
// considers: "Collect fails safe for references, not for uploads in
// flight"), a commit that checked its blob and then paused while Collect
// ran must not land a reference to a blob Collect deleted (promises 20 and
// 24). Collect may delete the blob, but then the commit must be refused.
func TestPromise24_CollectOfBlobsWithoutCreationTime(t *testing.T) {
	ctx := t.Context()
	mem := &writefence.MemStore{Clock: func() time.Time { return time.Time{} }}
	key := mustKey(t, "wal", "0")
	store := &holdingStore{MemStore: mem, key: key, arrived: make(chan struct{}), release: make(chan struct{})}
	writer := &writefence.Fence{Store: store}
	require.NoError(t, writer.Push(ctx, "wal", "0", "a", 1, []byte("manifest")))
	ref := putBlob(t, writer, "a", 2, "segment")

	store.mu.Lock()
	store.holding = true
	store.mu.Unlock()
	done := make(chan error, 1)
	go func() { done <- writer.Commit(ctx, "wal", "0", "a", 2, appendBlob(ref)) }()
	<-store.arrived // the commit checked its blob and sent its write

	collector := &writefence.Fence{Store: mem}
	report, err := collector.Collect(ctx, "wal", "0", writefence.GCOptions{})
	require.NoError(t, err)
	t.Logf("collect deleted %d blobs", len(report.Deleted))

	close(store.release)
	err = <-done
	info, ierr := collector.Inspect(ctx, "wal", "0")
	require.NoError(t, ierr)
	for _, r := range info.Blobs {
		_, err := readBlob(t, collector, r.Name)
		assert.NoError(t, err, "every blob the recorded manifest references exists")
	}
	if len(report.Deleted) > 0 {
		require.Error(t, err, "the commit of a deleted blob is refused")
	}
}
