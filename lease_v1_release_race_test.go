package writefence

import (
	"context"
	"encoding/binary"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence/internal/fakeclock"
	"github.com/writefence/writefence/internal/hook"
	"github.com/writefence/writefence/internal/keys"
	"github.com/writefence/writefence/internal/record"
)

// encodeLeaseV1 is a lease record of format version 1, as a release
// before the incarnation wrote it.
func encodeLeaseV1(holder string, term uint64, expiry int64) []byte {
	b := make([]byte, leaseV1HeaderSize, leaseV1HeaderSize+len(holder)+record.ChecksumSize)
	copy(b, leaseMagic)
	b[4] = 1
	binary.BigEndian.PutUint16(b[5:], uint16(len(holder)))
	binary.BigEndian.PutUint64(b[7:], term)
	binary.BigEndian.PutUint64(b[15:], uint64(expiry))
	b = append(b, holder...)
	return binary.BigEndian.AppendUint32(b, record.CRC32C(b))
}

// TestLeaseTakesOverFormatV1: a record of format version 1 that an older
// release wrote, naming the same Holder, is another Lease value's (it
// bears no incarnation): held while unexpired, then taken over at the
// next term (never renewed over as this Lease's own, never refused for
// good); one naming another holder is held until it expires too.
func TestLeaseTakesOverFormatV1(t *testing.T) {
	ctx := t.Context()
	clock := &fakeclock.Clock{}
	key, err := keys.Lease("", "leader")
	require.NoError(t, err)

	store := &MemStore{}
	_, err = store.PutIfVersion(ctx, key, encodeLeaseV1("a", 5, clock.Now().Add(time.Hour).UnixNano()), "")
	require.NoError(t, err)
	a := newTestLease(store, "a", clock.Now)
	_, err = a.Acquire(ctx)
	require.ErrorIs(t, err, ErrLeaseHeld, "unexpired: another incarnation's")
	clock.Advance(time.Hour)
	term, err := a.Acquire(ctx)
	require.NoError(t, err)
	assert.Equal(t, uint64(6), term)
	data, _, err := store.Get(ctx, key)
	require.NoError(t, err)
	rec, check := decodeLease(data)
	require.Empty(t, check)
	assert.Equal(t, byte(leaseVersion), data[4], "the takeover writes format version 2")
	assert.Equal(t, uint64(6), rec.Term)
	assert.Equal(t, a.incarnation, rec.Incarnation)
	require.NoError(t, a.Renew(ctx))
	require.NoError(t, a.Release(ctx))

	other := &MemStore{}
	expiry := clock.Now().Add(time.Second)
	_, err = other.PutIfVersion(ctx, key, encodeLeaseV1("b", 5, expiry.UnixNano()), "")
	require.NoError(t, err)
	a = newTestLease(other, "a", clock.Now)
	_, err = a.Acquire(ctx)
	var held *LeaseHeldError
	require.ErrorAs(t, err, &held)
	assert.Equal(t, "b", held.Holder)
	clock.Advance(2 * time.Second)
	term, err = a.Acquire(ctx)
	require.NoError(t, err)
	assert.Equal(t, uint64(6), term)
}

// TestLeaseReleaseLostReply: a release that landed but whose reply was
// lost is recognised by reading the record: Release succeeds, the record
// shows the lease released at its term, and the next acquisition, by
// anyone, takes term + 1 at once.
func TestLeaseReleaseLostReply(t *testing.T) {
	var lose atomic.Int64
	ctx := hook.With(t.Context(), &hook.Hooks{Wait: func(context.Context, int, time.Duration) error { return nil }, Write: losingReplies(&lose)})
	store := &MemStore{}
	clock := &fakeclock.Clock{}
	a := newTestLease(store, "a", clock.Now)
	_, err := a.Acquire(ctx)
	require.NoError(t, err)

	lose.Store(1)
	require.NoError(t, a.Release(ctx))
	key, _ := keys.Lease("", "leader")
	data, _, err := store.Get(ctx, key)
	require.NoError(t, err)
	rec, check := decodeLease(data)
	require.Empty(t, check)
	assert.Equal(t, leaseRecord{Holder: "a", Term: 1, Expiry: 0, Incarnation: a.incarnation}, rec)
	require.ErrorIs(t, a.Renew(ctx), ErrLeaseLost)
	_, err = a.Epoch(ctx, "p", "s")
	require.ErrorIs(t, err, ErrLeaseLost)

	b := newTestLease(store, "b", clock.Now)
	term, err := b.Acquire(ctx)
	require.NoError(t, err)
	assert.Equal(t, uint64(2), term)
	term, err = a.Acquire(ctx)
	var held *LeaseHeldError
	require.ErrorAs(t, err, &held, "term %d", term)
}

// TestLeaseSameHolderRace: two Lease values of one Holder on one shared
// Clock race Acquire, both having read the lease absent: exactly one
// holds it, and the other, reading again after its write conflicted, is
// refused as any other contender would be. Two processes under one name
// never both hold the lease.
func TestLeaseSameHolderRace(t *testing.T) {
	// The first two writes wait for each other, so that both acquisitions
	// read the lease absent before either writes.
	var reads, writes atomic.Int32
	both := make(chan struct{})
	ctx := hook.With(t.Context(), &hook.Hooks{
		Wait: func(context.Context, int, time.Duration) error { return nil },
		Read: func(context.Context, string) error { reads.Add(1); return nil },
		Write: func(ctx context.Context, _ string, write func() (string, error)) (string, error) {
			if n := writes.Add(1); n <= 2 {
				if n == 2 {
					close(both)
				}
				select {
				case <-both:
				case <-ctx.Done():
					return "", ctx.Err()
				}
			}
			return write()
		},
	})
	store := &MemStore{}
	fixed := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return fixed }
	leases := [2]*Lease{newTestLease(store, "a", clock), newTestLease(store, "a", clock)}
	var terms [2]uint64
	var errs [2]error
	var wg sync.WaitGroup
	for i, l := range leases {
		wg.Go(func() { terms[i], errs[i] = l.Acquire(ctx) })
	}
	wg.Wait()
	require.Equal(t, int32(3), reads.Load(), "both read the lease absent, and the loser read it again")
	winner, loser := 0, 1
	if errs[0] != nil {
		winner, loser = 1, 0
	}
	require.NoError(t, errs[winner])
	assert.Equal(t, uint64(1), terms[winner])
	var held *LeaseHeldError
	require.ErrorAs(t, errs[loser], &held)
	assert.Equal(t, uint64(1), held.Term)
	_, err := leases[loser].Epoch(ctx, "p", "s")
	require.ErrorIs(t, err, ErrLeaseLost, "the loser holds nothing")
	_, err = leases[winner].Epoch(ctx, "p", "s")
	require.NoError(t, err)
	require.NoError(t, leases[winner].Renew(ctx))
}
