package writefence

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence/internal/hook"
)

// Breaks the lost-reply rule (promise 2's "a retried write whose reply was
// lost is reported landed") on the lease's rewrite path, and ErrLeaseLost's
// meaning (promise 6): a Lease whose own move to the next term landed with
// its reply lost calls that move a takeover by someone else, drops the
// lease, and returns ErrLeaseLost, while the store shows it holding the
// new term until its expiry (so nobody, itself included, can take that
// term over before then).
//
// Epoch moves to term+1 by rewrite, which recognises its own landed write
// only within one call (the bytes its last attempt wrote) and otherwise
// accepts only a record of its current term. A move whose reply was lost
// and that the same call could not confirm leaves the Lease at its old
// term; the next Epoch conditions the move on the old version, conflicts,
// reads its own record of term+1, and decides "now held by node-a at term
// 2": its own name, its own term.
//
// Sequence (MemStore): acquire term 1; the term's epochs run out; Epoch's
// rollover write lands but its reply is lost, and the reads that would
// confirm it fail until the call gives up (ErrOutcomeUnknown); the next
// Epoch, a second later, is expected to hand out an epoch of term 2, the
// term the store shows this Lease holding. (With the clock standing still
// it does, but only by the flaw of TestAttackLeaseOneTermTwoHolders: the
// record happens to equal the bytes the conflicting attempt meant to
// write.)
func TestAttackLeaseRolloverLostReplyDropsOwnTerm(t *testing.T) {
	ctx := t.Context()
	store := &MemStore{}
	clock := newLeaseClock()
	a := acquiredLease(t, store, "node-a", clock.now)
	a.Fence.MaxAttempts = 3
	a.mu.Lock()
	a.seq = maxLeaseSeq
	a.mu.Unlock()

	errLost := errors.New("reply lost")
	lost := false
	hctx := hook.With(ctx, &hook.Hooks{
		Write: func(_ context.Context, _ string, write func() (string, error)) (string, error) {
			if _, err := write(); err != nil {
				return "", err
			}
			lost = true
			return "", errLost // landed; the reply is lost
		},
		Read: func(context.Context, string) error {
			if lost {
				return errLost // the confirming reads fail too
			}
			return nil
		},
		Wait: func(context.Context, int, time.Duration) error { return nil },
	})
	_, err := a.Epoch(hctx, "wal", "0")
	require.ErrorIs(t, err, ErrOutcomeUnknown)

	key, err := a.check()
	require.NoError(t, err)
	data, _, err := store.Get(ctx, key)
	require.NoError(t, err)
	rec, check := decodeLease(data)
	require.Empty(t, check)
	require.Equal(t, "node-a", rec.holder)
	require.Equal(t, uint64(2), rec.term, "the move to term 2 landed")

	clock.advance(time.Second) // well within the TTL
	epoch, err := a.Epoch(ctx, "wal", "0")
	require.NoError(t, err, "the store shows this Lease holding term 2, by its own write")
	require.Equal(t, uint64(2<<leaseSeqBits|1), epoch)
}
