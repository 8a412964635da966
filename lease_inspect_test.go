package writefence_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/fakestore"
)

// TestInspectLease: InspectLease shows the holder, term and expiry a
// Lease wrote, a release, and refuses a lease never acquired and a record
// that does not decode, writing nothing.
func TestInspectLease(t *testing.T) {
	ctx := context.Background()
	store := &writefence.MemStore{}
	fence := &writefence.Fence{Store: store, Prefix: "app/"}
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	l := &writefence.Lease{Fence: fence, Name: "wal/0", Holder: "node-a", TTL: time.Minute, Clock: func() time.Time { return now }}

	_, err := fence.InspectLease(ctx, "wal/0")
	require.ErrorIs(t, err, writefence.ErrNotFound)

	term, err := l.Acquire(ctx)
	require.NoError(t, err)
	info, err := fence.InspectLease(ctx, "wal/0")
	require.NoError(t, err)
	_, version, err := store.Get(ctx, "app/_lease/wal%2F0")
	require.NoError(t, err)
	assert.Equal(t, writefence.LeaseInfo{Name: "wal/0", Key: "app/_lease/wal%2F0", Version: version, Holder: "node-a", Term: term,
		Expiry: now.Add(time.Minute)}, info)
	assert.False(t, info.Released())

	require.NoError(t, l.Release(ctx))
	info, err = fence.InspectLease(ctx, "wal/0")
	require.NoError(t, err)
	assert.True(t, info.Released())
	assert.Equal(t, term, info.Term, "a release keeps the term")

	_, err = store.PutIfVersion(ctx, "app/_lease/x", []byte("not a lease"), "")
	require.NoError(t, err)
	_, err = fence.InspectLease(ctx, "x")
	var corrupt *writefence.CorruptError
	require.ErrorAs(t, err, &corrupt)
	assert.Equal(t, "lease: magic", corrupt.Check)
	assert.NotEmpty(t, corrupt.Version)

	_, err = fence.InspectLease(ctx, "")
	assert.ErrorIs(t, err, writefence.ErrInvalidArgument)
}

// TestInspectLeaseRetriesAThrottledRead: InspectLease's read is a read
// like any other (promise 6): one transient failure is retried after a
// back-off, not the end of the call.
func TestInspectLeaseRetriesAThrottledRead(t *testing.T) {
	ctx := t.Context()
	mem := &writefence.MemStore{}
	l := &writefence.Lease{Fence: &writefence.Fence{Store: mem}, Name: "wal/0", Holder: "node-a", TTL: time.Minute}
	term, err := l.Acquire(ctx)
	require.NoError(t, err)
	s := fakestore.New(mem, fakestore.Options{ByKey: true})
	s.Inject(throttled(fakestore.Get, 1))
	info, err := (&writefence.Fence{Store: s, RetryDelay: time.Microsecond}).InspectLease(ctx, "wal/0")
	require.NoError(t, err, "one 503 is retried")
	assert.Equal(t, term, info.Term)
	assert.Equal(t, int64(2), s.Calls(fakestore.Get, info.Key), "the throttled read, then its retry")
}
