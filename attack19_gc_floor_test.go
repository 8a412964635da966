package writefence_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
)

// TestAttack19CollectDeletesABlobThatIsThenCommitted shows Collect
// deleting, as "never committable", a blob that a writer at an admissible
// epoch does commit, so that the recorded manifest ends up referencing a
// deleted blob (promises: Collect never deletes a blob the recorded
// manifest references, nor one a writer racing at an admissible epoch may
// still commit; a commit lands only while every blob it newly references
// exists).
//
// Collect's rule deletes at once a blob "by another writer than the
// manifest's at an epoch not above the manifest's (its writer could only
// commit it in a tenure of its own, which would begin above that epoch)".
// A record in format version 2 carries no tenure floor, and Commit over
// such a record by the writer that wrote it keeps floor 0: that writer's
// older blobs are committable again.
//
// Sequence (pushes only until the commit, so the record is in format
// version 2, as the package keeps it for a shard that never held a
// manifest): b uploads a blob at epoch 1 and is deposed; a pushes at epoch
// 3. Collect reads the record (a, 3), lists b's blob, classes it as never
// committable (b != a, 1 <= 3) and, right before it deletes it (a hook in
// DeleteBlob, no sleep), b takes over: it seals at epoch 4 and commits at
// epoch 5 a manifest referencing its epoch-1 blob, which Commit accepts
// (the blob exists, floor 0). Collect then deletes the blob.
//
// Expected: either b's commit is refused (its tenure began at 4) or the
// blob survives; the manifest never references a deleted blob.
// Observed: the commit lands, Collect deletes the blob, and OpenBlob of a
// blob the manifest references fails with "a referenced blob is missing".
func TestAttack19CollectDeletesABlobThatIsThenCommitted(t *testing.T) {
	ctx := t.Context()
	mem := &writefence.MemStore{}
	blobs := &attack19Blobs{MemStore: mem}
	collector := &writefence.Fence{Store: mem, Blobs: blobs}
	a := &writefence.Fence{Store: mem, Blobs: blobs}
	b := &writefence.Fence{Store: mem, Blobs: blobs}

	early := putBlob(t, b, "b", 1, "b's segment of epoch 1")
	require.NoError(t, a.Push(ctx, "wal", "0", "a", 3, []byte("a's state")))

	var once sync.Once
	raced := false
	blobs.beforeDelete = func(_ context.Context, key string) {
		if !strings.HasSuffix(key, early.Name) {
			return
		}
		once.Do(func() {
			// b, at admissible epochs, between Collect's read of the
			// record and its delete.
			require.NoError(t, b.Seal(ctx, "wal", "0", "b", 4))
			raced = b.Commit(ctx, "wal", "0", "b", 5, appendBlob(early)) == nil
		})
	}
	report, err := collector.Collect(ctx, "wal", "0", writefence.GCOptions{Grace: 24 * time.Hour})
	require.NoError(t, err)
	require.True(t, raced, "the race ran: b's commit of its epoch-1 blob landed before the delete")

	info, err := collector.Inspect(ctx, "wal", "0")
	require.NoError(t, err)
	require.Contains(t, info.Blobs, early, "the recorded manifest references b's epoch-1 blob")
	for _, d := range report.Deleted {
		assert.False(t, strings.HasSuffix(d.Key, early.Name), "Collect deleted %s, which the recorded manifest references", early.Name)
	}
	_, err = readBlob(t, collector, early.Name)
	assert.NoError(t, err, "a blob the recorded manifest references is readable")
}
