package writefence_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/fakeclock"
	"github.com/writefence/writefence/internal/fakestore"
)

// TestPromise15_HoldLosingTheLeaseWhileSealingReturnsTheLoss: a takeover
// whose seal is slow, and whose lease another holder takes over meanwhile
// (by a clock of its own that has passed the expiry) and seals the shard
// at its own, higher term, returns the loss (promise 15: "A takeover whose
// lease is lost or expires while it seals returns the loss or the
// expiry"): an error matching ErrLeaseLost that names the new holder and
// term. It is not the refusal Hold reserves for a lease whose terms are
// behind the shard's epochs ("stop and look, retrying does not help"):
// here the lease is simply held by someone else, as any takeover loses it.
func TestPromise15_HoldLosingTheLeaseWhileSealingReturnsTheLoss(t *testing.T) {
	ctx := t.Context()
	mem := &writefence.MemStore{}
	shard := writefence.Shard{Plugin: "wal", Shard: "0"}
	slow := &fakestore.Gate{} // holds the first write of the shard's record
	store := fakestore.New(mem, fakestore.Options{Faults: []fakestore.Fault{{Op: fakestore.Put, Key: mustKey(t, "wal", "0"), Times: 1, Gate: slow}}})

	clockA, clockB := &fakeclock.Clock{}, &fakeclock.Clock{}
	clockB.Advance(2 * time.Hour) // B's clock has passed A's expiry
	a := &writefence.Lease{Fence: &writefence.Fence{Store: store}, Name: "wal/0", Holder: "a", TTL: time.Hour, Clock: clockA.Now}
	b := &writefence.Lease{Fence: &writefence.Fence{Store: mem}, Name: "wal/0", Holder: "b", TTL: time.Hour, Clock: clockB.Now}

	held := make(chan error, 1)
	go func() {
		_, err := a.Hold(ctx, shard)
		held <- err
	}()
	<-slow.Arrived() // A holds term 1; its seal's write is slow

	_, err := b.Hold(ctx, shard)
	require.NoError(t, err, "B takes the lease over at term 2 and seals the shard")
	defer b.Release(context.WithoutCancel(ctx))
	slow.Open()

	err = <-held
	require.Error(t, err)
	require.ErrorIs(t, err, writefence.ErrLeaseLost, "A's lease was taken over while it sealed: Hold returns the loss")
	var lost *writefence.LeaseLostError
	if assert.ErrorAs(t, err, &lost) {
		assert.Equal(t, "b", lost.Holder)
		assert.Equal(t, uint64(2), lost.NewTerm)
	}
	assert.NotContains(t, err.Error(), "retrying does not help")
	assert.NotContains(t, err.Error(), "the lease's terms are behind the shard's epochs")
}
