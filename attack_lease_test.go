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

// Breaks promise 6 (a term is acquired by one holder only): two Lease
// values of one Holder (a restarted process and its previous incarnation,
// which the lease is documented to fence) both acquire the same term, and
// both keep renewing it.
//
// Acquire recognises "an earlier attempt of this call landed" by the bytes
// alone: a record equal to the one its last attempt wrote. A lease record
// holds only the holder, the term and the expiry, so when two Lease values
// of one Holder compute the same expiry (the same Clock reading: a coarse
// or rounded clock, a clock shared by a test, a system whose clock ticks
// in microseconds or milliseconds), the rival's record is byte-for-byte
// the one this call meant to write. The loser's write was refused with a
// clean ErrConflict, so it certainly did not land; yet its retry reads
// the winner's record, takes it for its own, and returns the same term.
// Renew then carries the duplicate on: it takes a record of its own term
// and holder at another version for a lost reply of its own and rewrites
// it, so both values renew one term for ever.
//
// Sequence (MemStore, one fixed Clock): the restarted value reads the
// absent record and computes (node-a, term 1, expiry); before its
// create-only write, the old value's Acquire runs whole and lands the same
// bytes; the restarted value's write conflicts; its retry reads the record,
// finds it equal to what it meant to write, and returns term 1 too. Both
// then hand out the same epochs and both renewals land.
func TestAttackLeaseOneTermTwoHolders(t *testing.T) {
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
