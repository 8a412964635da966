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
	gate, _, _, done := pausedCommit(t, mem, 2)

	collector := &writefence.Fence{Store: mem}
	report, err := collector.Collect(ctx, "wal", "0", writefence.GCOptions{})
	require.NoError(t, err)
	t.Logf("collect deleted %d blobs", len(report.Deleted))

	gate.Open()
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
