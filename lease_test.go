package writefence_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/fakeclock"
	"github.com/writefence/writefence/internal/fakestore"
	"github.com/writefence/writefence/internal/hook"
	"github.com/writefence/writefence/internal/keys"
	"github.com/writefence/writefence/internal/record"
	"github.com/writefence/writefence/internal/testserver"
	"github.com/writefence/writefence/writefencetest"
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

// TestLeaseRecordLost: a lease record deleted or set back under the Lease
// that held it.
func TestLeaseRecordLost(t *testing.T) {
	eachLossStore(t, func(t *testing.T, s lossStore) {
		ctx := t.Context()
		f := &writefence.Fence{Store: s}
		key, err := keys.Lease("", "L")
		require.NoError(t, err)
		l := &writefence.Lease{Fence: f, Name: "L", Holder: "h1", TTL: time.Minute}
		term, err := l.Acquire(ctx)
		require.NoError(t, err)
		require.Equal(t, uint64(1), term)
		first := bytesAt(t, s, key)

		// Deleted while held: the renewal reports the lease lost, and
		// regressed.
		require.NoError(t, s.Delete(ctx, key))
		err = l.Renew(ctx)
		var lost *writefence.LeaseLostError
		require.ErrorAs(t, err, &lost)
		assert.ErrorIs(t, err, writefence.ErrLeaseLost)
		assert.ErrorIs(t, err, writefence.ErrEpochRegressed)
		assert.Equal(t, "writefence: lease L: term 1: the record is gone: writefence: lease lost", err.Error())
		_, err = l.Epoch(ctx, "wal", "0")
		require.ErrorIs(t, err, writefence.ErrEpochRegressed)

		// The Lease that held term 1 will not take term 1 again.
		_, err = l.Acquire(ctx)
		requireRegressed(t, errors.Unwrap(err), writefence.EpochRegressedError{Op: "lease acquire", Key: key, Seen: 1, SeenWriter: "h1", Absent: true})
		assert.Equal(t, "writefence: lease L: acquire: epoch regressed: lease acquire of "+key+" refused: saw term 1 by h1, found no record", err.Error())
		_, _, err = s.Get(ctx, key)
		require.ErrorIs(t, err, writefence.ErrNotFound, "nothing written")

		// The operator settles the absent record at the highest term
		// granted; the next acquisition takes the term after it.
		op := &writefence.Lease{Fence: &writefence.Fence{Store: s}, Name: "L", Holder: "operator", TTL: time.Minute}
		require.ErrorIs(t, op.Settle(ctx, "v0", 1), writefence.ErrNotFound)
		require.NoError(t, op.Settle(ctx, "", 1))
		require.NoError(t, op.Settle(ctx, "", 1), "the settle run again once it landed")
		require.ErrorIs(t, op.Settle(ctx, "", 2), writefence.ErrConflict, "a record exists")
		term, err = l.Acquire(ctx)
		require.NoError(t, err)
		require.Equal(t, uint64(2), term)

		// Set back to term 1 while term 2 is held: lost and regressed.
		setBack(t, s, key, first)
		err = l.Renew(ctx)
		require.ErrorIs(t, err, writefence.ErrLeaseLost)
		require.ErrorIs(t, err, writefence.ErrEpochRegressed)
		assert.Equal(t, "writefence: lease L: term 2: the record went back to term 1 by h1: writefence: lease lost", err.Error())
		_, err = l.Acquire(ctx)
		require.ErrorIs(t, err, writefence.ErrEpochRegressed)

		// A takeover is lost, not regressed.
		taken := &writefence.LeaseLostError{Name: "L", Term: 2, Holder: "h2", NewTerm: 3}
		assert.NotErrorIs(t, taken, writefence.ErrEpochRegressed)
		assert.ErrorIs(t, taken, writefence.ErrLeaseLost)
	})
}

// TestLeaseClockOutOfRange: a clock the lease record cannot carry (before
// 1970, after 2262 in Unix nanoseconds) is refused before anything is
// written.
func TestLeaseClockOutOfRange(t *testing.T) {
	for name, now := range map[string]time.Time{
		"before 1970": time.Date(1969, 12, 31, 23, 0, 0, 0, time.UTC),
		"after 2262":  time.Date(2262, 4, 12, 0, 0, 0, 0, time.UTC),
	} {
		t.Run(name, func(t *testing.T) {
			mem := &writefence.MemStore{}
			l := &writefence.Lease{Fence: &writefence.Fence{Store: mem}, Name: "n", Holder: "h", TTL: time.Minute,
				Clock: func() time.Time { return now }}
			_, err := l.Acquire(t.Context())
			var ia *writefence.InvalidArgumentError
			require.ErrorAs(t, err, &ia)
			assert.Equal(t, "clock", ia.Arg)
			keys := 0
			require.NoError(t, mem.List(t.Context(), "", func(string) error { keys++; return nil }))
			assert.Zero(t, keys, "nothing written")
		})
	}
}

// TestLeaseKit runs the epoch-source kit over Leases of one record, in a
// synctest bubble: a leader is a Lease of its own holder that acquired
// the lease; it is deposed by its TTL passing (a sleep, at once in the
// bubble), a contender taking the lease over, and its Renew learning of
// the takeover (a *LeaseLostError). It resigns with Release.
func TestLeaseKit(t *testing.T) {
	writefencetest.TestEpochSource(t, func(*testing.T) writefencetest.Election {
		const ttl = 10 * time.Second
		store := &writefence.MemStore{}
		var leader, next *writefence.Lease
		holders := 0
		contender := func(t *testing.T) *writefence.Lease {
			holders++
			l := &writefence.Lease{Fence: &writefence.Fence{Store: store}, Name: "kit", Holder: fmt.Sprint("node-", holders), TTL: ttl}
			_, err := l.Acquire(t.Context())
			require.NoError(t, err)
			return l
		}
		return writefencetest.Election{
			Lead: func(t *testing.T) writefence.EpochSource {
				leader, next = next, nil
				if leader == nil {
					leader = contender(t)
				}
				return leader
			},
			Depose: func(t *testing.T) {
				time.Sleep(ttl)
				next = contender(t)
				var lost *writefence.LeaseLostError
				require.ErrorAs(t, leader.Renew(t.Context()), &lost)
			},
			Deposed: writefence.ErrLeaseLost,
			Resign:  func(t *testing.T) { require.NoError(t, leader.Release(t.Context())) },
		}
	}, &writefencetest.SourceOptions{Bubble: true})
}

func TestLeaseInvalid(t *testing.T) {
	store := &writefence.MemStore{}
	for name, l := range map[string]*writefence.Lease{
		"fence":  {Name: "n", Holder: "h", TTL: time.Second},
		"store":  {Fence: &writefence.Fence{}, Name: "n", Holder: "h", TTL: time.Second},
		"holder": {Fence: &writefence.Fence{Store: store}, Name: "n", TTL: time.Second},
		"long":   {Fence: &writefence.Fence{Store: store}, Name: "n", Holder: strings.Repeat("h", record.MaxWriterLen+1), TTL: time.Second},
		"ttl":    {Fence: &writefence.Fence{Store: store}, Name: "n", Holder: "h"},
		"name":   {Fence: &writefence.Fence{Store: store}, Holder: "h", TTL: time.Second},
	} {
		_, err := l.Acquire(t.Context())
		assert.ErrorIs(t, err, writefence.ErrInvalidArgument, name)
	}
	assert.Empty(t, testserver.Keys(t, store))
}

// TestPromise3_HoldRefusesAShardItCannotSealBeforeTakingTheLease: an
// invalid argument writes nothing (promise 3; bad input gets a clear
// typed error and nothing is written). Hold checks its shards' record
// keys before it acquires, but under KeepFloor a seal also needs the
// shard's floor key, which is 5 bytes longer than the record's: a shard
// whose record key fits and whose floor key does not passes Hold's check,
// the lease is taken (a new term, deposing the previous holder), and
// only then the seal is refused as an invalid argument, and the lease
// released.
func TestPromise3_HoldRefusesAShardItCannotSealBeforeTakingTheLease(t *testing.T) {
	ctx := context.Background()
	mem := &writefence.MemStore{}
	f := &writefence.Fence{Store: mem, KeepFloor: true}
	plugin := strings.Repeat("\x01", 256) // 768 bytes escaped
	shard := strings.Repeat("\x01", 80)   // 240 bytes escaped: the record key is 1022 bytes, the floor key 1027
	require.NoError(t, f.Seal(ctx, "wal", "0", "w", 1), "the store works")
	_, err := f.Inspect(ctx, plugin, shard)
	require.ErrorIs(t, err, writefence.ErrNotFound, "the shard's name is valid")

	l := &writefence.Lease{Fence: f, Name: "l", Holder: "h", TTL: time.Minute}
	_, err = l.Hold(ctx, writefence.Shard{Plugin: plugin, Shard: shard})
	require.ErrorIs(t, err, writefence.ErrInvalidArgument)
	_, err = f.InspectLease(ctx, "l")
	assert.ErrorIs(t, err, writefence.ErrNotFound, "a Hold refused for its arguments took the lease")
}
