package writefence_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/hook"
)

// TestLeaseOneTermOneHolder: two Lease values of one Holder (a restarted
// process and its previous incarnation, which the lease fences) never
// both acquire one term, even when they compute the same expiry (one
// fixed Clock): each record bears its Lease value's random incarnation,
// so the restarted value's retry, after its create-only write conflicted
// with the old value's, does not take the old value's record for its own
// landed write. It takes the lease over at term 2 instead, and the old
// value's renewal is refused.
func TestLeaseOneTermOneHolder(t *testing.T) {
	ctx := context.Background()
	store := &writefence.MemStore{}
	fixed := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return fixed }
	lease := func() *writefence.Lease {
		return &writefence.Lease{Fence: &writefence.Fence{Store: store}, Name: "leader", Holder: "node-a", TTL: 10 * time.Second, Clock: clock}
	}
	old, restarted := lease(), lease()

	var (
		oldTerm uint64
		oldErr  error
		raced   bool
	)
	hctx := hook.With(ctx, &hook.Hooks{
		// The restarted value's first write: the old value acquires first.
		Write: func(_ context.Context, _ string, write func() (string, error)) (string, error) {
			if !raced {
				raced = true
				oldTerm, oldErr = old.Acquire(ctx)
			}
			return write()
		},
		Wait: func(context.Context, int, time.Duration) error { return nil },
	})
	newTerm, newErr := restarted.Acquire(hctx)
	require.True(t, raced)
	require.NoError(t, oldErr)

	// Exactly one of the two may hold term 1; the other must be refused
	// (or, as a takeover by the same holder, get term 2).
	held := 0
	for _, r := range []struct {
		term uint64
		err  error
	}{{oldTerm, nil}, {newTerm, newErr}} {
		if r.err == nil && r.term == 1 {
			held++
		}
	}
	assert.Equal(t, 1, held, "two Lease values acquired term 1: old got term %d, restarted got term %d (%v)", oldTerm, newTerm, newErr)

	// What that costs: both hand out the same epochs, and both renew.
	e1, err1 := old.Epoch(ctx, "wal", "0")
	e2, err2 := restarted.Epoch(ctx, "wal", "0")
	if err1 == nil && err2 == nil {
		assert.NotEqual(t, e1, e2, "two holders drew the same epoch %d", e1)
	}
	r1, r2 := old.Renew(ctx), restarted.Renew(ctx)
	assert.False(t, r1 == nil && r2 == nil, "both Lease values renewed the one term")
}
