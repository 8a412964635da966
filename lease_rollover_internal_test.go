package writefence

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence/internal/fakeclock"
	"github.com/writefence/writefence/internal/hook"
)

// TestLeaseRolloverLostReplyKeepsOwnTerm: a Lease whose move to the next
// term (its epochs ran out) landed with its reply lost, and whose
// confirming reads failed until the call gave up (ErrOutcomeUnknown),
// finds its own record of the next term on its next Epoch (its
// incarnation, its holder, the term it moved to) and carries on at that
// term, rather than calling its own move a takeover and dropping the
// lease the store shows it holding.
func TestLeaseRolloverLostReplyKeepsOwnTerm(t *testing.T) {
	ctx := t.Context()
	store := &MemStore{}
	clock := &fakeclock.Clock{}
	a := acquiredLease(t, store, "node-a", clock.Now)
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
	require.Equal(t, "node-a", rec.Holder)
	require.Equal(t, uint64(2), rec.Term, "the move to term 2 landed")

	clock.Advance(time.Second) // well within the TTL
	epoch, err := a.Epoch(ctx, "wal", "0")
	require.NoError(t, err, "the store shows this Lease holding term 2, by its own write")
	require.Equal(t, uint64(2<<leaseSeqBits|1), epoch)
}
