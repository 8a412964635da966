package writefence

import (
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLeaseHeld: Held shows nothing before the first acquisition, then
// the term and its expiry by the Lease's clock, the expiry moving with
// each renewal, an expiry in the past once renewals stop landing, a new
// term after a takeover by another Lease value, and nothing once the
// lease is lost or released.
func TestLeaseHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var cut atomic.Bool
		ctx := cutOff(t.Context(), &cut)
		store := &MemStore{}
		a := holdLease(&Fence{Store: store}, "a")
		term, expiry, ok := a.Held()
		assert.False(t, ok)
		assert.Zero(t, term)
		assert.True(t, expiry.IsZero())

		start := time.Now()
		got, err := a.Acquire(ctx)
		require.NoError(t, err)
		term, expiry, ok = a.Held()
		require.True(t, ok)
		assert.Equal(t, got, term)
		assert.Equal(t, start.Add(holdTTL), expiry)

		time.Sleep(time.Second)
		require.NoError(t, a.Renew(ctx))
		_, expiry, ok = a.Held()
		require.True(t, ok)
		assert.Equal(t, start.Add(time.Second+holdTTL), expiry, "a renewal moves the expiry")

		cut.Store(true)
		time.Sleep(holdTTL + time.Second)
		require.Error(t, a.Renew(ctx))
		term2, expiry, ok := a.Held()
		require.True(t, ok, "an expired lease is still held: a renewal may land")
		assert.Equal(t, term, term2)
		assert.True(t, expiry.Before(time.Now()), "the expiry is in the past")
		cut.Store(false)

		b := holdLease(&Fence{Store: store}, "b")
		bterm, err := b.Acquire(ctx)
		require.NoError(t, err)
		term, _, ok = b.Held()
		require.True(t, ok)
		assert.Equal(t, bterm, term)
		assert.Equal(t, term2+1, term)

		require.ErrorIs(t, a.Renew(ctx), ErrLeaseLost)
		_, _, ok = a.Held()
		assert.False(t, ok, "lost")

		require.NoError(t, b.Release(ctx))
		_, _, ok = b.Held()
		assert.False(t, ok, "released")
	})
}
