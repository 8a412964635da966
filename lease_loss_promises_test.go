package writefence_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/fakeclock"
	"github.com/writefence/writefence/internal/fakestore"
	"github.com/writefence/writefence/internal/keys"
)

// TestPromise16_RenewThatReadsATakeoverEndsTheLease: a renewal whose
// first write loses its reply, and whose retry then reads the record of
// another holder at a later term, has learned that the lease is lost,
// whatever became of its own write: nothing it wrote can outrank a later
// term. By the time Renew returns, the Lease hands out no more epochs
// (promise 14) and the Deposed contexts of the shards it gates are done
// (promise 16).
func TestPromise16_RenewThatReadsATakeoverEndsTheLease(t *testing.T) {
	ctx := t.Context()
	mem := &writefence.MemStore{}
	leaseKey, err := keys.Lease("", "wal/0")
	require.NoError(t, err)
	store := counted(mem)

	clockA, clockB := &fakeclock.Clock{}, &fakeclock.Clock{}
	clockB.Advance(2 * time.Hour) // B's clock has passed A's expiry
	a := &writefence.Lease{Fence: &writefence.Fence{Store: store, RetryDelay: time.Microsecond}, Name: "wal/0", Holder: "a", TTL: time.Hour, Clock: clockA.Now}
	b := &writefence.Lease{Fence: &writefence.Fence{Store: mem}, Name: "wal/0", Holder: "b", TTL: time.Hour, Clock: clockB.Now}

	_, err = a.Acquire(ctx)
	require.NoError(t, err)
	_, err = a.Epoch(ctx, "wal", "0")
	require.NoError(t, err)
	deposed, stop := a.Fence.Deposed(ctx, "wal", "0")
	defer stop()

	// A's renewal sends its write; B takes the lease over meanwhile; the
	// write then fails with a network error that hides its outcome (it
	// wrote nothing): what a writer sees when its connection drops while
	// others write.
	held := &fakestore.Gate{}
	store.Inject(fakestore.Fault{Op: fakestore.Put, Key: leaseKey, Times: 1, Gate: held,
		Err: &writefence.StoreError{Op: "test put", Key: leaseKey, Err: errors.New("connection reset by peer")}})
	renewed := make(chan error, 1)
	go func() { renewed <- a.Renew(ctx) }()
	<-held.Arrived()
	term, err := b.Acquire(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(2), term)
	held.Open()
	err = <-renewed
	require.Error(t, err, "the renewal did not land: B holds term 2")
	t.Logf("renew: %v", err)

	_, err = a.Epoch(ctx, "wal", "0")
	assert.ErrorIs(t, err, writefence.ErrLeaseLost, "A read B's term: it hands out no epoch of its own lost term")
	assert.Error(t, deposed.Err(), "the shard A gates is told at once")
	var lost *writefence.LeaseLostError
	assert.ErrorAs(t, context.Cause(deposed), &lost)
}
