package writefence

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence/internal/fakeclock"
	"github.com/writefence/writefence/internal/hook"
	"github.com/writefence/writefence/internal/keys"
	"github.com/writefence/writefence/internal/record"
	"github.com/writefence/writefence/internal/testserver"
)

func newTestLease(store ConditionalStore, holder string, clock func() time.Time) *Lease {
	return &Lease{Fence: &Fence{Store: store}, Name: "leader", Holder: holder, TTL: 10 * time.Second, Clock: clock}
}

// TestLeaseCorruptRecordFailsClosed: a record that fails to decode is
// neither taken over nor renewed over, and its holder stops.
func TestLeaseCorruptRecordFailsClosed(t *testing.T) {
	ctx := t.Context()
	store := &MemStore{}
	clock := &fakeclock.Clock{}
	a := acquiredLease(t, store, "a", clock.Now)

	key, err := keys.Lease("", "leader")
	require.NoError(t, err)
	_, v, err := store.Get(ctx, key)
	require.NoError(t, err)
	v, err = store.PutIfVersion(ctx, key, []byte("garbage"), v)
	require.NoError(t, err)

	var ce *CorruptError
	require.ErrorAs(t, a.Renew(ctx), &ce)
	assert.Equal(t, v, ce.Version)
	_, err = a.Epoch(ctx, "p", "s")
	require.ErrorIs(t, err, ErrLeaseLost)
	clock.Advance(time.Hour)
	_, err = newTestLease(store, "b", clock.Now).Acquire(ctx)
	require.ErrorIs(t, err, ErrCorrupt)
	data, v2, err := store.Get(ctx, key)
	require.NoError(t, err)
	assert.Equal(t, "garbage", string(data))
	assert.Equal(t, v, v2)
}

// TestLeaseTakeover walks one lease through its life: held, refused to
// others, renewed, expired, taken over, lost.
func TestLeaseTakeover(t *testing.T) {
	ctx := t.Context()
	store := &MemStore{}
	clock := &fakeclock.Clock{}
	a, b := newTestLease(store, "a", clock.Now), newTestLease(store, "b", clock.Now)

	_, err := a.Epoch(ctx, "p", "s")
	require.ErrorIs(t, err, ErrLeaseLost, "not acquired yet")
	require.ErrorIs(t, a.Renew(ctx), ErrLeaseLost)

	term, err := a.Acquire(ctx)
	require.NoError(t, err)
	assert.Equal(t, uint64(1), term)
	e1, err := a.Epoch(ctx, "p", "s")
	require.NoError(t, err)
	e2, err := a.Epoch(ctx, "other", "shard")
	require.NoError(t, err)
	assert.Equal(t, uint64(1<<32|1), e1)
	assert.Equal(t, e1+1, e2)

	_, err = b.Acquire(ctx)
	var held *LeaseHeldError
	require.ErrorAs(t, err, &held)
	assert.Equal(t, "a", held.Holder)
	assert.Equal(t, uint64(1), held.Term)
	assert.True(t, clock.Now().Add(10*time.Second).Equal(held.Expiry), "expiry %v", held.Expiry)

	clock.Advance(6 * time.Second)
	term, err = a.Acquire(ctx) // held: renews, keeps the term
	require.NoError(t, err)
	assert.Equal(t, uint64(1), term)
	clock.Advance(6 * time.Second) // 12s after acquiring, 6s after renewing
	_, err = b.Acquire(ctx)
	require.ErrorIs(t, err, ErrLeaseHeld)

	clock.Advance(4 * time.Second) // the renewal has expired
	_, err = a.Epoch(ctx, "p", "s")
	require.ErrorIs(t, err, ErrLeaseExpired)
	_, _, ok := leaseHeld(a)
	assert.False(t, ok)
	term, err = b.Acquire(ctx)
	require.NoError(t, err)
	assert.Equal(t, uint64(2), term)
	eb, err := b.Epoch(ctx, "p", "s")
	require.NoError(t, err)
	assert.Greater(t, eb, e2)
	assert.Equal(t, uint64(2), leaseTerm(eb))

	err = a.Renew(ctx)
	require.ErrorIs(t, err, ErrLeaseLost)
	assert.Contains(t, err.Error(), "taken over by b at term 2")
	_, err = a.Epoch(ctx, "p", "s")
	require.ErrorIs(t, err, ErrLeaseLost)
	require.ErrorIs(t, a.Release(ctx), ErrLeaseLost)
	term, exp, ok := leaseHeld(b)
	assert.True(t, ok)
	assert.Equal(t, uint64(2), term)
	assert.Equal(t, clock.Now().Add(10*time.Second), exp)
}

// TestLeaseRenewAfterLocalExpiry: a holder whose lease expired by its clock
// but was not taken over renews, keeps its term and continues its epochs.
func TestLeaseRenewAfterLocalExpiry(t *testing.T) {
	ctx := t.Context()
	clock := &fakeclock.Clock{}
	a := newTestLease(&MemStore{}, "a", clock.Now)
	_, err := a.Acquire(ctx)
	require.NoError(t, err)
	e1, err := a.Epoch(ctx, "p", "s")
	require.NoError(t, err)
	clock.Advance(time.Minute)
	_, err = a.Epoch(ctx, "p", "s")
	require.ErrorIs(t, err, ErrLeaseExpired)
	require.NoError(t, a.Renew(ctx))
	e2, err := a.Epoch(ctx, "p", "s")
	require.NoError(t, err)
	assert.Equal(t, e1+1, e2)
}

// TestLeaseReleaseThenAcquire: a release lets the next holder in at once,
// one term up; a restarted holder (a new Lease value of the same holder)
// takes over at once, one term up, and its previous incarnation is lost.
func TestLeaseReleaseThenAcquire(t *testing.T) {
	ctx := t.Context()
	store := &MemStore{}
	clock := &fakeclock.Clock{}
	a, b := newTestLease(store, "a", clock.Now), newTestLease(store, "b", clock.Now)
	_, err := a.Acquire(ctx)
	require.NoError(t, err)
	require.NoError(t, a.Release(ctx))
	_, err = a.Epoch(ctx, "p", "s")
	require.ErrorIs(t, err, ErrLeaseLost)
	require.ErrorIs(t, a.Release(ctx), ErrLeaseLost, "released twice")

	term, err := b.Acquire(ctx)
	require.NoError(t, err)
	assert.Equal(t, uint64(2), term, "no clock advance needed after a release")

	// A second Lease value of "b" (a restarted process, or a second one
	// started under the same name) waits like any contender.
	restarted := newTestLease(store, "b", clock.Now)
	_, err = restarted.Acquire(ctx)
	var held *LeaseHeldError
	require.ErrorAs(t, err, &held, "another value of the holder is refused while the term is unexpired")
	assert.Equal(t, "b", held.Holder)
	require.NoError(t, b.Renew(ctx), "the holder keeps its term")
	require.NoError(t, b.Release(ctx))
	term, err = restarted.Acquire(ctx)
	require.NoError(t, err)
	assert.Equal(t, uint64(3), term)
	require.ErrorIs(t, b.Renew(ctx), ErrLeaseLost)

	term, err = a.Acquire(ctx) // held by restarted "b", unexpired
	require.ErrorIs(t, err, ErrLeaseHeld)
	assert.Zero(t, term)
}

// TestLeaseEpochsRollOver: when a term's epochs run out, Epoch moves the
// lease to the next term, and the epochs keep rising.
func TestLeaseEpochsRollOver(t *testing.T) {
	ctx := t.Context()
	store := &MemStore{}
	clock := &fakeclock.Clock{}
	a := acquiredLease(t, store, "a", clock.Now)
	a.mu.Lock()
	a.seq = maxLeaseSeq - 1
	a.mu.Unlock()
	last, err := a.Epoch(ctx, "p", "s")
	require.NoError(t, err)
	assert.Equal(t, uint64(1<<32|maxLeaseSeq), last)
	next, err := a.Epoch(ctx, "p", "s")
	require.NoError(t, err)
	assert.Equal(t, uint64(2<<32|1), next)

	key, _ := keys.Lease("", "leader")
	data, _, err := store.Get(ctx, key)
	require.NoError(t, err)
	rec, check := decodeLease(data)
	require.Empty(t, check)
	assert.Equal(t, uint64(2), rec.Term, "the store records the new term")
	require.NoError(t, a.Renew(ctx))
}

var errLeaseReplyLost = errors.New("reply lost")

// losingReplies is a write hook that makes each write and reports the next
// *lose of those that landed as failed, as a lost reply would.
func losingReplies(lose *atomic.Int64) func(context.Context, string, func() (string, error)) (string, error) {
	return func(_ context.Context, _ string, write func() (string, error)) (string, error) {
		v, err := write()
		if err == nil && lose.Add(-1) >= 0 {
			return "", errLeaseReplyLost
		}
		return v, err
	}
}

// TestLeaseLostReplies: writes that landed but whose replies were lost are
// recognised by reading the record, so the holder neither fails nor loses
// its lease.
func TestLeaseLostReplies(t *testing.T) {
	var lose atomic.Int64
	ctx := hook.With(t.Context(), &hook.Hooks{Write: losingReplies(&lose)})
	clock := &fakeclock.Clock{}
	a := newTestLease(&MemStore{}, "a", clock.Now)

	lose.Store(1)
	term, err := a.Acquire(ctx)
	require.NoError(t, err, "the acquire landed; a read proves it")
	assert.Equal(t, uint64(1), term)

	lose.Store(1)
	require.NoError(t, a.Renew(ctx))
	lose.Store(3) // three renewals in a row lose their replies
	clock.Advance(time.Second)
	require.NoError(t, a.Renew(ctx))
	clock.Advance(time.Second)
	require.NoError(t, a.Renew(ctx))
	clock.Advance(time.Second)
	require.NoError(t, a.Renew(ctx))
	_, exp, ok := leaseHeld(a)
	require.True(t, ok)
	assert.Equal(t, clock.Now().Add(10*time.Second), exp)

	// A cancelled context hides the outcome: the error says so and the
	// lease stays held locally.
	lose.Store(1)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	err = a.Renew(cctx)
	require.Error(t, err)
	_, _, ok = leaseHeld(a)
	assert.True(t, ok)
	require.NoError(t, a.Renew(ctx), "the next renewal finds its own term and lands")
}

// TestLeaseContention: holders contend for one lease on a shared fake
// clock, acquiring, renewing, drawing epochs and releasing at random. At no
// clock time do two holders' terms overlap, every term has one holder,
// terms rise by one, and every epoch is drawn within its term's interval.
func TestLeaseContention(t *testing.T) {
	const holders, steps = 8, 1000
	const ttl = 100 * time.Millisecond
	store := &MemStore{}
	clock := &fakeclock.Clock{}

	type grant struct {
		term       uint64
		holder     string
		start, end int64 // fake-clock nanoseconds
		released   bool
	}
	type drawn struct {
		epoch uint64
		at    int64
	}
	var (
		mu     sync.Mutex // guards grants and epochs
		grants []grant
		epochs []drawn
		held   atomic.Int64 // ErrLeaseHeld refusals
	)
	record := func(l *Lease) {
		term, exp, _ := leaseHeld(l)
		mu.Lock()
		grants = append(grants, grant{term: term, holder: l.Holder, start: exp.Add(-ttl).UnixNano(), end: exp.UnixNano()})
		mu.Unlock()
	}

	draw := func(l *Lease) {
		at := clock.Now().UnixNano()
		e, err := l.Epoch(context.Background(), "p", "s")
		switch {
		case err == nil:
			mu.Lock()
			epochs = append(epochs, drawn{epoch: e, at: at})
			mu.Unlock()
		case !errors.Is(err, ErrLeaseExpired) && !errors.Is(err, ErrLeaseLost):
			t.Errorf("%s: Epoch: %v", l.Holder, err)
		}
	}

	var wg sync.WaitGroup
	for i := range holders {
		l := &Lease{Fence: &Fence{Store: store}, Name: "leader", Holder: fmt.Sprintf("h%d", i), TTL: ttl, Clock: clock.Now}
		rng := rand.New(rand.NewPCG(uint64(i), 7))
		wg.Go(func() {
			ctx := context.Background()
			for range steps {
				// Steps of up to 40ms against a TTL of 100ms, and renewals
				// rare enough, that leases often expire while held and
				// others take them over.
				clock.Advance(time.Duration(rng.IntN(40)) * time.Millisecond)
				runtime.Gosched()
				// Now and then draw an epoch whatever the lease's state: it
				// must be refused unless the lease is held.
				if rng.IntN(4) == 0 {
					draw(l)
					continue
				}
				if _, _, ok := leaseHeld(l); !ok {
					_, err := l.Acquire(ctx)
					switch {
					case err == nil:
						record(l)
					case errors.Is(err, ErrLeaseHeld):
						held.Add(1)
					default:
						t.Errorf("%s: Acquire: %v", l.Holder, err)
					}
					continue
				}
				switch rng.IntN(10) {
				case 0:
					at := clock.Now().UnixNano()
					term, _, _ := leaseHeld(l)
					if err := l.Release(ctx); err == nil {
						mu.Lock()
						grants = append(grants, grant{term: term, holder: l.Holder, end: at, released: true})
						mu.Unlock()
					} else if !errors.Is(err, ErrLeaseLost) {
						t.Errorf("%s: Release: %v", l.Holder, err)
					}
				case 1:
					if err := l.Renew(ctx); err == nil {
						record(l)
					} else if !errors.Is(err, ErrLeaseLost) {
						t.Errorf("%s: Renew: %v", l.Holder, err)
					}
				default:
					draw(l)
				}
			}
		})
	}
	wg.Wait()

	// Fold the grants into one interval per term.
	type span struct {
		holder     string
		start, end int64
		released   bool
	}
	terms := make(map[uint64]*span)
	for _, g := range grants {
		s, ok := terms[g.term]
		if !ok {
			terms[g.term] = &span{holder: g.holder, start: g.start, end: g.end, released: g.released}
			continue
		}
		require.Equal(t, s.holder, g.holder, "term %d granted to two holders", g.term)
		switch {
		case g.released:
			s.end, s.released = g.end, true
		case s.released:
			t.Fatalf("term %d renewed after its release", g.term)
		default:
			if g.start != 0 && (s.start == 0 || g.start < s.start) {
				s.start = g.start
			}
			s.end = max(s.end, g.end)
		}
	}
	n := uint64(len(terms))
	require.Greater(t, n, uint64(10), "too few takeovers to prove anything")
	for term := uint64(1); term <= n; term++ {
		s, ok := terms[term]
		require.True(t, ok, "term %d never granted, yet %d terms were: terms must rise by one", term, n)
		if next, ok := terms[term+1]; ok {
			require.LessOrEqual(t, s.end, next.start,
				"term %d (%s) lasts until %d, after term %d (%s) starts at %d", term, s.holder, s.end, term+1, next.holder, next.start)
		}
	}
	sort.Slice(epochs, func(i, j int) bool { return epochs[i].at < epochs[j].at })
	for i, d := range epochs {
		s := terms[leaseTerm(d.epoch)]
		require.NotNil(t, s, "epoch %d of an unknown term", d.epoch)
		// A release ends a term at the instant of the call, after the
		// holder's last epoch, which the fake clock may give the same time.
		within := s.start <= d.at && (d.at < s.end || s.released && d.at == s.end)
		require.True(t, within, "epoch %d drawn at %d outside its term [%d, %d)", d.epoch, d.at, s.start, s.end)
		if i > 0 && epochs[i-1].at < d.at {
			require.Less(t, epochs[i-1].epoch, d.epoch, "epochs drawn later are greater")
		}
	}
	t.Logf("%d holders x %d steps: %d terms, %d grants, %d epochs drawn, %d acquisitions refused as held",
		holders, steps, n, len(grants), len(epochs), held.Load())
}

// TestLeaseZombieFenced: a holder pauses, its lease is taken over, and the
// new holder seals the shard. The paused holder wakes with a clock that
// never moved, so it still believes it holds the lease and keeps drawing
// epochs: every push it makes is refused by the store, and the payload the
// new holder sealed is kept. A shard the new holder did not seal shows
// what the seal is for: the zombie's push there lands.
func TestLeaseZombieFenced(t *testing.T) {
	ctx := t.Context()
	store := &MemStore{}
	f := &Fence{Store: store}
	frozen := &fakeclock.Clock{} // the zombie's clock stops when it pauses
	clock := &fakeclock.Clock{}
	a := newTestLease(store, "a", frozen.Now)
	_, err := a.Acquire(ctx)
	require.NoError(t, err)
	e, err := a.Epoch(ctx, "wal", "0")
	require.NoError(t, err)
	require.NoError(t, f.Seal(ctx, "wal", "0", "a", e))
	for i := range 3 {
		_, err := f.PushFrom(ctx, a, "wal", "0", "a", fmt.Appendf(nil, "a %d", i))
		require.NoError(t, err)
	}
	pending, err := a.Epoch(ctx, "wal", "0") // drawn just before the pause
	require.NoError(t, err)

	clock.Advance(time.Minute)
	b := newTestLease(store, "b", clock.Now)
	term, err := b.Acquire(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(2), term)
	seal, err := b.Epoch(ctx, "wal", "0")
	require.NoError(t, err)
	require.NoError(t, f.Seal(ctx, "wal", "0", "b", seal))

	// The zombie wakes: the epoch it held, and every new one it draws.
	refused := 0
	err = f.Push(ctx, "wal", "0", "a", pending, []byte("a late"))
	require.ErrorIs(t, err, ErrStaleEpoch)
	refused++
	for i := range 20 {
		e, err := f.PushFrom(ctx, a, "wal", "0", "a", fmt.Appendf(nil, "a zombie %d", i))
		require.Equal(t, uint64(1), leaseTerm(e), "the zombie still draws epochs of its term")
		var se *StaleEpochError
		require.ErrorAs(t, err, &se)
		assert.Equal(t, seal, se.RecordedEpoch)
		assert.Equal(t, "b", se.RecordedWriter)
		refused++
	}
	epoch, writer, payload, err := f.Latest(ctx, "wal", "0")
	require.NoError(t, err)
	assert.Equal(t, seal, epoch)
	assert.Equal(t, "b", writer)
	assert.Equal(t, "a 2", string(payload), "the seal keeps the last landed payload")

	_, err = f.PushFrom(ctx, b, "wal", "0", "b", []byte("b 1"))
	require.NoError(t, err)
	_, err = f.PushFrom(ctx, a, "wal", "unsealed", "a", []byte("a zombie"))
	require.NoError(t, err, "without a seal the zombie lands until the new holder's first push")

	require.ErrorIs(t, a.Renew(ctx), ErrLeaseLost)
	_, err = a.Epoch(ctx, "wal", "0")
	require.ErrorIs(t, err, ErrLeaseLost)
	t.Logf("%d zombie pushes after the seal, all refused as stale", refused)
}

// leaseTerm returns the term of the lease an epoch was drawn in.
func leaseTerm(epoch uint64) uint64 { return epoch >> leaseSeqBits }

// leaseHeld reports the term l holds and when it stops handing out epochs, by
// its own clock; ok is false when it does not hold the lease or that time
// has passed.
func leaseHeld(l *Lease) (term uint64, expiry time.Time, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.held {
		return 0, time.Time{}, false
	}
	return l.term, l.expiry, l.now().Before(l.expiry)
}

// acquiredLease returns a Lease of holder that has acquired the lease.
func acquiredLease(t *testing.T, store ConditionalStore, holder string, clock func() time.Time) *Lease {
	t.Helper()
	l := newTestLease(store, holder, clock)
	_, err := l.Acquire(t.Context())
	require.NoError(t, err)
	return l
}

// holdTTL is the TTL of the tests that run in a synctest bubble, on the
// bubble's clock: Hold renews every 3s and seals a takeover by 6.75s.
const holdTTL = 9 * time.Second

// holdLease returns a Lease of holder on f, on the real (or the bubble's)
// clock.
func holdLease(f *Fence, holder string) *Lease {
	return &Lease{Fence: f, Name: "leader", Holder: holder, TTL: holdTTL}
}

// acquiredHolder is holdLease of holder "a" over f, its lease acquired.
func acquiredHolder(ctx context.Context, t *testing.T, f *Fence) *Lease {
	t.Helper()
	a := holdLease(f, "a")
	_, err := a.Acquire(ctx)
	require.NoError(t, err)
	return a
}

// skewedLease is a contender whose clock runs a minute ahead: it sees any
// lease of holdTTL expired and takes it over at once, as a contender with
// a wrong clock may. Safety does not depend on clocks; this is how the
// tests make a takeover while the holder still believes it holds.
func skewedLease(store ConditionalStore, holder string) *Lease {
	l := holdLease(&Fence{Store: store}, holder)
	l.Clock = func() time.Time { return time.Now().Add(time.Minute) }
	return l
}

// TestLeaseLostReachesEveryCall: whichever call of a deposed holder finds
// the takeover first, every call after names the new holder and its term:
// Epoch, Renew, Release, and Fence.PushFrom through Epoch, whose message
// does not repeat the prefix. Before any call reads the lease record, the
// store itself refuses the holder's push, naming the new holder's writer
// and an epoch of its term.
func TestLeaseLostReachesEveryCall(t *testing.T) {
	for _, first := range []string{"background renewal", "Renew", "Acquire", "Release"} {
		t.Run(first, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := t.Context()
				store := &MemStore{}
				f := &Fence{Store: store}
				a := holdLease(f, "a")
				var held context.Context
				if first == "background renewal" {
					var err error
					held, err = a.Hold(ctx, Shard{"wal", "0"})
					require.NoError(t, err)
				} else {
					_, err := a.Acquire(ctx)
					require.NoError(t, err)
					e, err := a.Epoch(ctx, "wal", "0")
					require.NoError(t, err)
					require.NoError(t, f.Seal(ctx, "wal", "0", "a", e))
				}
				b := skewedLease(store, "b")
				_, err := b.Hold(ctx, Shard{"wal", "0"})
				require.NoError(t, err)

				// a has not read the lease record yet: the store refuses its push.
				_, err = f.PushFrom(ctx, a, "wal", "0", "a", []byte("late"))
				var stale *StaleEpochError
				require.ErrorAs(t, err, &stale)
				assert.Equal(t, "b", stale.RecordedWriter)
				assert.Equal(t, uint64(2), leaseTerm(stale.RecordedEpoch))

				want := LeaseLostError{Name: "leader", Term: 1, Holder: "b", NewTerm: 2}
				var lost *LeaseLostError
				switch first {
				case "background renewal":
					<-held.Done()
					require.ErrorAs(t, context.Cause(held), &lost)
				case "Renew":
					require.ErrorAs(t, a.Renew(ctx), &lost)
				case "Acquire":
					_, err := a.Acquire(ctx)
					var heldErr *LeaseHeldError
					require.ErrorAs(t, err, &heldErr)
					assert.Equal(t, "b", heldErr.Holder)
					assert.Equal(t, uint64(2), heldErr.Term)
					lost = &want
				case "Release":
					require.ErrorAs(t, a.Release(ctx), &lost)
				}
				assert.Equal(t, want, *lost)

				msg := "writefence: lease leader: term 1: taken over by b at term 2: writefence: lease lost"
				_, err = a.Epoch(ctx, "wal", "0")
				require.ErrorAs(t, err, &lost, "Epoch")
				assert.Equal(t, want, *lost)
				assert.EqualError(t, err, msg)
				err = a.Renew(ctx)
				require.ErrorAs(t, err, &lost, "Renew")
				assert.EqualError(t, err, msg)
				_, err = f.PushFrom(ctx, a, "wal", "0", "a", []byte("late"))
				require.ErrorAs(t, err, &lost, "PushFrom")
				assert.Equal(t, want, *lost)
				assert.EqualError(t, err, "writefence: epoch source: lease leader: term 1: taken over by b at term 2: writefence: lease lost")
				assert.NotContains(t, err.Error(), "writefence: epoch source: writefence:")
				err = a.Release(ctx)
				require.ErrorAs(t, err, &lost, "Release")
				assert.EqualError(t, err, msg)
				require.NoError(t, b.Release(ctx))
			})
		})
	}
}

// TestLeaseEpochDuringRenewal: Epoch does not wait for a renewal in
// flight: a renewal held inside its write leaves Epoch free.
func TestLeaseEpochDuringRenewal(t *testing.T) {
	ctx := t.Context()
	a := acquiredLease(t, &MemStore{}, "a", (&fakeclock.Clock{}).Now)
	leaseKey, err := keys.Lease("", "leader")
	require.NoError(t, err)
	entered, release := make(chan struct{}), make(chan struct{})
	hooked := hook.With(ctx, &hook.Hooks{Write: func(_ context.Context, key string, write func() (string, error)) (string, error) {
		if key == leaseKey {
			close(entered)
			<-release
		}
		return write()
	}})
	renewed := make(chan error, 1)
	go func() { renewed <- a.Renew(hooked) }()
	<-entered
	e, err := a.Epoch(ctx, "wal", "0")
	require.NoError(t, err)
	assert.Equal(t, uint64(1<<32|1), e)
	close(release)
	require.NoError(t, <-renewed)
}

// TestLeaseSettleCorruptRecord: a lease record that fails to decode
// blocks every acquisition, for good; Lease.Settle, at exactly its
// version and a term the operator asserts, replaces it with a released
// record, and the next acquisition takes the next term at once. A settle
// never lowers the term of a record that decodes, and is refused at any
// other version.
func TestLeaseSettleCorruptRecord(t *testing.T) {
	ctx := t.Context()
	store := &MemStore{}
	clock := &fakeclock.Clock{}
	a := newTestLease(store, "a", clock.Now)
	_, err := a.Acquire(ctx)
	require.NoError(t, err)
	key, err := keys.Lease("", "leader")
	require.NoError(t, err)
	data, v, err := store.Get(ctx, key)
	require.NoError(t, err)
	data[len(data)-1] ^= 1
	_, err = store.PutIfVersion(ctx, key, data, v)
	require.NoError(t, err)

	b := newTestLease(store, "b", clock.Now)
	_, err = b.Acquire(ctx)
	var ce *CorruptError
	require.ErrorAs(t, err, &ce, "no acquisition overwrites a corrupt lease record")
	clock.Advance(time.Hour)
	_, err = b.Acquire(ctx)
	require.ErrorIs(t, err, ErrCorrupt, "not even once it expired")

	require.ErrorIs(t, b.Settle(ctx, "other", 5), ErrConflict)
	require.NoError(t, b.Settle(ctx, ce.Version, 5))
	require.NoError(t, b.Settle(ctx, ce.Version, 5), "a settle found landed returns nil")
	term, err := b.Acquire(ctx)
	require.NoError(t, err)
	assert.Equal(t, uint64(6), term, "the next acquisition takes the term after the settled one")

	_, v, err = store.Get(ctx, key)
	require.NoError(t, err)
	require.ErrorIs(t, b.Settle(ctx, v, 3), ErrInvalidArgument, "never below the term of a record that decodes")
	require.NoError(t, b.Settle(ctx, v, 6), "an operator's release of a gone holder's lease, at its own term")
	c := newTestLease(store, "c", clock.Now)
	term, err = c.Acquire(ctx)
	require.NoError(t, err)
	assert.Equal(t, uint64(7), term)
}

// The tests of Hold run in a synctest bubble: time.Now, the renewer's
// timers and the engine's back-offs all run on the bubble's clock, which
// moves only when every goroutine of the test is blocked, so "the moment
// the lease expires" is an exact instant and every test is deterministic.

var errCut = errors.New("store unreachable")

// cutOff returns ctx with hooks that fail every read and write the engine
// makes under it while cut is set, as a network partition between a holder
// and the store would. A Hold's renewals and seals run under the context
// it was given, so they are cut off too.
func cutOff(ctx context.Context, cut *atomic.Bool) context.Context {
	return hook.With(ctx, &hook.Hooks{
		Read: func(context.Context, string) error {
			if cut.Load() {
				return errCut
			}
			return nil
		},
		Write: func(_ context.Context, _ string, write func() (string, error)) (string, error) {
			if cut.Load() {
				return "", errCut
			}
			return write()
		},
	})
}

// landings records when a Fence's writes landed, by op, on the bubble's
// clock.
type landings struct {
	mu sync.Mutex // guards at
	at map[string][]time.Time
}

func (l *landings) observe(_ context.Context, e WriteEvent) {
	if e.Err != nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.at == nil {
		l.at = make(map[string][]time.Time)
	}
	l.at[e.Op] = append(l.at[e.Op], time.Now())
}

func (l *landings) of(op string) []time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]time.Time(nil), l.at[op]...)
}

// TestLeaseHoldRenewsEveryThirdOfTTL: under Hold the lease renews itself
// every TTL/3 from the acquisition, so a holder ships for ten TTLs at one
// term, and stops renewing the moment it releases.
func TestLeaseHoldRenewsEveryThirdOfTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		seen := &landings{}
		f := &Fence{Store: &MemStore{}, Observer: seen.observe}
		l := holdLease(f, "a")
		start := time.Now()
		held, err := l.Hold(ctx, Shard{"wal", "0"})
		require.NoError(t, err)
		for i := range 88 {
			epoch, err := f.PushFrom(held, l, "wal", "0", "a", fmt.Appendf(nil, "segment %d", i))
			require.NoError(t, err, "push %d", i)
			require.Equal(t, uint64(1), leaseTerm(epoch))
			time.Sleep(time.Second)
		}
		time.Sleep(time.Second / 2) // 88.5s: between two renewals
		require.NoError(t, held.Err())
		renewals := seen.of(opLeaseRenew)
		require.Len(t, renewals, 29)
		for i, at := range renewals {
			assert.Equal(t, start.Add(time.Duration(i+1)*holdTTL/3), at, "renewal %d", i)
		}

		require.NoError(t, l.Release(ctx))
		require.ErrorIs(t, context.Cause(held), ErrLeaseLost)
		assert.Equal(t, "writefence: lease leader: term 1: released: writefence: lease lost", context.Cause(held).Error())
		time.Sleep(time.Minute)
		assert.Len(t, seen.of(opLeaseRenew), 29, "no renewal after Release")
	})
}

// TestLeaseHoldRenewsBeforeSeal: the renewer runs from the moment the
// lease is acquired, before any seal: a seal that waits for the first
// renewal lands TTL/3 after the acquisition, and Hold succeeds.
func TestLeaseHoldRenewsBeforeSeal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		renewed := make(chan struct{})
		var once sync.Once
		f := &Fence{Store: &MemStore{}, Observer: func(_ context.Context, e WriteEvent) {
			if e.Op == opLeaseRenew && e.Err == nil {
				once.Do(func() { close(renewed) })
			}
		}}
		shard := mustShardKey(t, "wal", "0")
		var sealed time.Time
		ctx := hook.With(t.Context(), &hook.Hooks{Write: func(ctx context.Context, key string, write func() (string, error)) (string, error) {
			if key == shard {
				select {
				case <-renewed:
				case <-ctx.Done():
					return "", ctx.Err()
				}
				sealed = time.Now()
			}
			return write()
		}})
		l := holdLease(f, "a")
		start := time.Now()
		_, err := l.Hold(ctx, Shard{"wal", "0"})
		require.NoError(t, err)
		assert.Equal(t, start.Add(holdTTL/3), sealed)
		require.NoError(t, l.Release(t.Context()))
	})
}

// TestLeaseHoldSealsWithinTerm: the acquisition runs with a deadline a
// quarter TTL before the acquired term would expire, each seal attempt
// with a deadline a TTL after it starts, and each shard is sealed at an
// epoch of the term.
func TestLeaseHoldSealsWithinTerm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		deadlines := make(map[string]time.Time)
		ctx := hook.With(t.Context(), &hook.Hooks{Read: func(ctx context.Context, key string) error {
			d, ok := ctx.Deadline()
			require.True(t, ok, "a read of %s without a deadline", key)
			mu.Lock()
			deadlines[key] = d
			mu.Unlock()
			return nil
		}})
		f := &Fence{Store: &MemStore{}}
		l := holdLease(f, "a")
		start := time.Now()
		_, err := l.Hold(ctx, Shard{"wal", "0"}, Shard{"wal", "1"})
		require.NoError(t, err)
		leaseKey, err := keys.Lease("", "leader")
		require.NoError(t, err)
		assert.Equal(t, map[string]time.Time{leaseKey: start.Add(holdTTL - holdTTL/4),
			mustShardKey(t, "wal", "0"): start.Add(holdTTL), mustShardKey(t, "wal", "1"): start.Add(holdTTL)}, deadlines)
		for i, shard := range []string{"0", "1"} {
			epoch, writer, payload, err := f.Latest(t.Context(), "wal", shard)
			require.NoError(t, err)
			assert.Equal(t, uint64(1<<32|uint64(i+1)), epoch)
			assert.Equal(t, "a", writer)
			assert.Empty(t, payload)
		}
		require.NoError(t, l.Release(t.Context()))
	})
}

// TestLeaseHoldKeepsSealing: a takeover whose seal the store holds up (as
// S3 servers hold an object while a paused writer's upload of it is in
// flight) keeps the lease, renewing it, and seals again until the seal
// lands, however long that takes: it never releases the lease, which would
// hand the shard back to the writer it fences. The previous holder stays
// deposed throughout, and the seal lands at the epoch drawn first.
func TestLeaseHoldKeepsSealing(t *testing.T) {
	for _, tc := range []struct {
		name  string
		lands bool // each stalled attempt lands once its caller gave up on it
	}{{"stalled attempts never land", false}, {"stalled attempts land late", true}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := t.Context()
				store := &MemStore{}
				f := &Fence{Store: store}
				a := acquiredHolder(ctx, t, f)
				e, err := a.Epoch(ctx, "wal", "0")
				require.NoError(t, err)
				require.NoError(t, f.Seal(ctx, "wal", "0", "a", e))
				_, err = f.PushFrom(ctx, a, "wal", "0", "a", []byte("segment 1"))
				require.NoError(t, err)
				time.Sleep(holdTTL + time.Second) // a stalls past its expiry

				shard := mustShardKey(t, "wal", "0")
				const stalls = 3 // the store holds up this many writes of the shard
				var mu sync.Mutex
				held := 0
				stalled := hook.With(ctx, &hook.Hooks{Write: func(ctx context.Context, key string, write func() (string, error)) (string, error) {
					mu.Lock()
					stall := key == shard && held < stalls
					if stall {
						held++
					}
					mu.Unlock()
					if !stall {
						return write()
					}
					<-ctx.Done()
					if tc.lands {
						_, _ = write()
					}
					return "", ctx.Err()
				}})
				b := holdLease(&Fence{Store: store}, "b")
				start := time.Now()
				held2, err := b.Hold(stalled, Shard{"wal", "0"})
				require.NoError(t, err, "the takeover seals in the end")
				assert.GreaterOrEqual(t, time.Since(start), stalls*holdTTL, "each stalled attempt waited a TTL")
				require.NoError(t, held2.Err(), "the lease is still held: renewed meanwhile")
				rec := leaseRecordOf(t, store)
				assert.Equal(t, "b", rec.Holder)
				assert.Equal(t, uint64(2), rec.Term, "never released: no term was burnt")
				assert.Greater(t, rec.Expiry, start.Add(holdTTL).UnixNano(), "renewed while it sealed")

				epoch, writer, payload, err := f.Latest(ctx, "wal", "0")
				require.NoError(t, err)
				assert.Equal(t, uint64(2<<32|1), epoch, "sealed at the epoch drawn first")
				assert.Equal(t, "b", writer)
				assert.Equal(t, "segment 1", string(payload))

				var lost *LeaseLostError
				require.ErrorAs(t, a.Renew(ctx), &lost, "the previous holder is not back in charge")
				assert.Equal(t, LeaseLostError{Name: "leader", Term: 1, Holder: "b", NewTerm: 2}, *lost)
				_, err = f.PushFrom(ctx, a, "wal", "0", "a", []byte("segment 2"))
				require.ErrorIs(t, err, ErrLeaseLost)
				require.NoError(t, b.Release(ctx))
			})
		})
	}
}

// TestLeaseHoldStopsBehindShard: Hold on a shard that records an epoch at
// or above every epoch of the lease's term (its record was deleted, so
// terms restarted) says so and stops, releasing the lease; it does not
// retry a seal no retry can land.
func TestLeaseHoldStopsBehindShard(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		f := &Fence{Store: &MemStore{}}
		require.NoError(t, f.Seal(ctx, "wal", "0", "old", 7<<32|3))
		l := holdLease(f, "a")
		_, err := l.Hold(ctx, Shard{"wal", "0"})
		require.ErrorIs(t, err, ErrStaleEpoch)
		assert.Contains(t, err.Error(), "records epoch 30064771075 (term 7) by old")
		assert.Contains(t, err.Error(), "the lease's terms are behind the shard's epochs")
		assert.NotErrorIs(t, err, ErrTakeoverTimeout)
		_, err = l.Epoch(ctx, "wal", "0")
		require.ErrorIs(t, err, ErrLeaseLost, "it holds nothing")
		rec := leaseRecordOf(t, f.Store)
		assert.Equal(t, leaseRecord{Holder: "a", Term: 1}, rec, "released")
	})
}

// TestLeaseHoldLost: a holder whose lease is taken over learns it at its
// next renewal: its context is done at that moment with a *LeaseLostError
// naming the new holder and term, and so is every Deposed context of a
// shard the lease gates (sealed by Hold, or handed an epoch), and no other.
func TestLeaseHoldLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		store := &MemStore{}
		f := &Fence{Store: store}
		a := holdLease(f, "a")
		start := time.Now()
		held, err := a.Hold(ctx, Shard{"wal", "0"})
		require.NoError(t, err)
		_, err = f.PushFrom(held, a, "wal", "1", "a", []byte("segment"))
		require.NoError(t, err)
		d0, stop0 := f.Deposed(ctx, "wal", "0")
		defer stop0()
		d1, stop1 := f.Deposed(ctx, "wal", "1")
		defer stop1()
		d2, stop2 := f.Deposed(ctx, "wal", "2")
		defer stop2()

		b := skewedLease(store, "b")
		heldB, err := b.Hold(ctx, Shard{"wal", "0"}, Shard{"wal", "1"})
		require.NoError(t, err)
		require.NoError(t, held.Err(), "a does not know yet")

		<-held.Done()
		// Its renewal conflicts, backs off (at most RetryDelay), reads.
		learned := time.Since(start)
		assert.True(t, learned >= holdTTL/3 && learned <= holdTTL/3+defaultRetryDelay, "a learns at its next renewal, not at %v", learned)
		want := LeaseLostError{Name: "leader", Term: 1, Holder: "b", NewTerm: 2}
		var lost *LeaseLostError
		require.ErrorAs(t, context.Cause(held), &lost)
		assert.Equal(t, want, *lost)
		for name, d := range map[string]context.Context{"wal/0": d0, "wal/1": d1} {
			require.ErrorAs(t, context.Cause(d), &lost, name)
			assert.Equal(t, want, *lost, name)
		}
		require.NoError(t, d2.Err(), "a shard the lease does not gate")
		require.NoError(t, heldB.Err())
		require.NoError(t, b.Release(ctx))
	})
}

// TestLeaseHoldExpires: a holder cut off from the store cannot renew; the
// moment its lease expires by its clock its context is done, and so are the
// Deposed contexts of the shards it gates, with an ErrLeaseExpired that
// says a takeover may follow (not ErrLeaseLost: nobody took it over as far
// as the holder can tell). Once the partition heals and nobody took the
// lease, a Renew lands and the holder carries on at its term.
func TestLeaseHoldExpires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var cut atomic.Bool
		ctx := cutOff(t.Context(), &cut)
		f := &Fence{Store: &MemStore{}}
		a := holdLease(f, "a")
		start := time.Now()
		held, err := a.Hold(ctx, Shard{"wal", "0"})
		require.NoError(t, err)
		d0, stop := f.Deposed(ctx, "wal", "0")
		defer stop()
		cut.Store(true)

		<-held.Done()
		assert.Equal(t, start.Add(holdTTL), time.Now(), "done the moment the lease expires")
		cause := context.Cause(held)
		require.ErrorIs(t, cause, ErrLeaseExpired)
		require.NotErrorIs(t, cause, ErrLeaseLost)
		assert.Regexp(t, `^writefence: lease leader: term 1 expired at \S+ by this holder's clock \(last renewal: lease leader: renew: outcome unknown: .*store unreachable.*\); no takeover seen, but one may follow: writefence: lease expired$`, cause.Error())
		assert.Equal(t, cause, context.Cause(d0))
		_, err = a.Epoch(ctx, "wal", "0")
		require.ErrorIs(t, err, ErrLeaseExpired)
		assert.Contains(t, err.Error(), "no takeover seen, but one may follow")

		cut.Store(false)
		require.NoError(t, a.Renew(ctx))
		e, err := a.Epoch(ctx, "wal", "0")
		require.NoError(t, err)
		assert.Equal(t, uint64(1<<32|2), e, "the same term, the next epoch")
		require.NoError(t, a.Release(ctx))
	})
}

// TestLeaseHoldCtxEnds: when the caller's context ends, the held context
// ends with its cause and renewals stop; the lease stays held until it
// expires, and Release still gives it up.
func TestLeaseHoldCtxEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		seen := &landings{}
		store := &MemStore{}
		a := holdLease(&Fence{Store: store, Observer: seen.observe}, "a")
		ctx, cancel := context.WithCancelCause(t.Context())
		held, err := a.Hold(ctx)
		require.NoError(t, err)
		time.Sleep(holdTTL/3 + time.Second) // one renewal, at 3s
		errStop := errors.New("shutting down")
		cancel(errStop)
		synctest.Wait()
		assert.Equal(t, errStop, context.Cause(held))

		time.Sleep(7 * time.Second) // 11s: before the expiry of the renewal at 3s
		_, err = a.Epoch(t.Context(), "wal", "0")
		require.NoError(t, err, "held until it expires")
		time.Sleep(2 * time.Second) // 13s
		_, err = a.Epoch(t.Context(), "wal", "0")
		require.ErrorIs(t, err, ErrLeaseExpired)
		assert.Len(t, seen.of(opLeaseRenew), 1, "no renewal after ctx ended")
		require.NoError(t, a.Release(t.Context()))
		assert.Equal(t, leaseRecord{Holder: "a", Term: 1}, leaseRecordOf(t, store))
	})
}

// TestLeaseHoldOnce: one Hold at a time per Lease; after Release, Hold
// takes the lease again. An invalid shard is refused before any I/O.
func TestLeaseHoldOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		store := &MemStore{}
		a := holdLease(&Fence{Store: store}, "a")
		_, err := a.Hold(ctx, Shard{"wal", ""})
		require.ErrorIs(t, err, ErrInvalidArgument)
		assert.Empty(t, testserver.Keys(t, store))

		_, err = a.Hold(ctx)
		require.NoError(t, err)
		_, err = a.Hold(ctx)
		assert.EqualError(t, err, "writefence: lease leader: Hold called while a Hold of this Lease is in force")
		require.NoError(t, a.Release(ctx))
		held, err := a.Hold(ctx)
		require.NoError(t, err)
		e, err := a.Epoch(held, "wal", "0")
		require.NoError(t, err)
		assert.Equal(t, uint64(2), leaseTerm(e))
		require.NoError(t, a.Release(ctx))
	})
}

// TestLeaseReleaseEndsAHoldBegunMeanwhile: a Release begins while the
// write of a Hold that began before it (a renewal of the lease the Lease
// holds) is under way, and waits for it. The Hold's acquisition lands
// after the Release began, so it can hand out no epoch: Hold gives it up
// and returns ErrLeaseLost, holding nothing, and the Release releases the
// lease. No context of a Hold is left live while Epoch refuses.
func TestLeaseReleaseEndsAHoldBegunMeanwhile(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, gate := gateWrites(t.Context())
		a := acquiredHolder(ctx, t, &Fence{Store: &MemStore{}})

		gate.armed.Store(true)
		type holdResult struct {
			ctx context.Context
			err error
		}
		holds := make(chan holdResult, 1)
		go func() {
			h, err := a.Hold(ctx) // renews the lease it holds: its write waits at the gate
			holds <- holdResult{h, err}
		}()
		synctest.Wait()
		released := make(chan error, 1)
		go func() { released <- a.Release(ctx) }()
		synctest.Wait() // Release waits for the Hold's write
		close(gate.open)

		h := <-holds
		require.ErrorIs(t, h.err, ErrLeaseLost, "the Hold's acquisition landed after the Release began")
		require.Nil(t, h.ctx)
		require.NoError(t, <-released)
		_, err := a.Epoch(ctx, "wal", "0")
		require.ErrorIs(t, err, ErrLeaseLost, "released")
		_, err = holdLease(a.Fence, "b").Acquire(ctx)
		require.NoError(t, err, "released: another Lease takes the lease at once")
	})
}

// TestLeaseHoldTakeoverRace: pipelines push to three shards under one
// Hold, each under its Deposed context, while the lease renews itself; a
// contender takes the lease over and seals the shards. Every pipeline
// stops (refused as stale, or told the lease is lost), none of the old
// holder's pushes lands after the new holder's seal of its shard, and the
// epochs that land on each shard strictly rise. Run it with -race.
func TestLeaseHoldTakeoverRace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		log := &landedLog{ConditionalStore: &MemStore{}}
		f := &Fence{Store: log}
		a := holdLease(f, "a")
		shards := []Shard{{"wal", "0"}, {"wal", "1"}, {"wal", "2"}}
		held, err := a.Hold(ctx, shards...)
		require.NoError(t, err)

		const pipelines = 3 // per shard
		var wg sync.WaitGroup
		ended := make([]error, len(shards)*pipelines)
		for i, s := range shards {
			for j := range pipelines {
				i := i*pipelines + j
				wg.Go(func() {
					shipping, stop := f.Deposed(held, s.Plugin, s.Shard)
					defer stop()
					for n := 0; ; n++ {
						_, err := f.PushFrom(shipping, a, s.Plugin, s.Shard, "a", fmt.Appendf(nil, "%s %d", s.Shard, n))
						if err != nil && shipping.Err() != nil {
							ended[i] = context.Cause(shipping)
							return
						}
						time.Sleep(100 * time.Millisecond)
					}
				})
			}
		}
		time.Sleep(holdTTL) // three renewals, many pushes
		b := skewedLease(log, "b")
		heldB, err := b.Hold(ctx, shards...)
		require.NoError(t, err)
		wg.Wait()
		require.NoError(t, heldB.Err())
		for i, cause := range ended {
			var stale *StaleEpochError
			var lost *LeaseLostError
			require.True(t, errors.As(cause, &stale) || errors.As(cause, &lost), "pipeline %d: %v", i, cause)
		}
		for _, s := range shards {
			key := mustShardKey(t, s.Plugin, s.Shard)
			epochs := log.epochs(key)
			sealedAt := -1
			for j, e := range epochs {
				if j > 0 {
					require.Greater(t, e.Epoch, epochs[j-1].Epoch, "%s: epochs rise", key)
				}
				if e.Writer == "b" && sealedAt < 0 {
					sealedAt = j
				}
				if sealedAt >= 0 {
					require.Equal(t, "b", e.Writer, "%s: a write by a after b's seal", key)
				}
			}
			require.Positive(t, sealedAt, "%s: a pushed, then b sealed", key)
		}
		require.NoError(t, b.Release(ctx))
	})
}

// landedLog is a store that logs the header of every write that lands, in
// the order the store took them.
type landedLog struct {
	ConditionalStore
	mu  sync.Mutex // guards log, and orders the writes
	log map[string][]record.Header
}

func (s *landedLog) PutIfVersion(ctx context.Context, key string, data []byte, expect string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, err := s.ConditionalStore.PutIfVersion(ctx, key, data, expect)
	if err == nil && strings.Contains(key, "/s/") {
		h, _, check := record.Decode(data)
		if check == "" {
			if s.log == nil {
				s.log = make(map[string][]record.Header)
			}
			s.log[key] = append(s.log[key], h)
		}
	}
	return v, err
}

func (s *landedLog) epochs(key string) []record.Header {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]record.Header(nil), s.log[key]...)
}

// leaseRecordOf returns the decoded lease record of the lease "leader",
// its incarnation checked present and zeroed, for comparison.
func leaseRecordOf(t *testing.T, store ConditionalStore) leaseRecord {
	t.Helper()
	key, err := keys.Lease("", "leader")
	require.NoError(t, err)
	data, _, err := store.Get(context.Background(), key)
	require.NoError(t, err)
	rec, check := decodeLease(data)
	require.Empty(t, check)
	require.NotZero(t, rec.Incarnation, "a Lease's record bears its incarnation")
	rec.Incarnation = [leaseIncSize]byte{} // compared apart: random per Lease value
	return rec
}

// mustShardKey returns the key of the record of (plugin, shard) under the
// default prefix.
func mustShardKey(t *testing.T, plugin, shard string) string {
	t.Helper()
	key, err := keys.Shard("", plugin, shard)
	require.NoError(t, err)
	return key
}

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

// TestLeaseReleaseWhoseCtxEndsWhileWaiting: Release says the Lease hands
// out no epoch after it, whatever the outcome. A Release whose ctx ends
// while it waits for another call's write of the record (a Renew held up
// by the store) returns ctx's error, and the Lease hands out no epoch,
// before that write ends or after it lands.
func TestLeaseReleaseWhoseCtxEndsWhileWaiting(t *testing.T) {
	ctx, gate := gateWrites(t.Context())
	clock := &fakeclock.Clock{}
	a := newTestLease(&MemStore{}, "a", clock.Now)
	_, err := a.Acquire(ctx)
	require.NoError(t, err)

	gate.armed.Store(true)
	renewed := make(chan error, 1)
	go func() { renewed <- a.Renew(ctx) }()
	<-gate.arrived // the renewal holds the Lease's writes
	open := sync.OnceFunc(func() { close(gate.open) })
	defer open()

	rctx, cancel := context.WithCancel(ctx)
	cancel()
	require.ErrorIs(t, a.Release(rctx), context.Canceled) // its ctx ended while it waited
	_, err = a.Epoch(ctx, "wal", "0")
	require.ErrorIs(t, err, ErrLeaseLost, "Release: the Lease hands out no epoch after, whatever the outcome")

	open()
	require.NoError(t, <-renewed)
	_, err = a.Epoch(ctx, "wal", "0")
	require.ErrorIs(t, err, ErrLeaseLost, "Release: the Lease hands out no epoch after, whatever the outcome")
}

// TestLeaseHoldSealRacesItsOwnEpoch: Hold by a Lease that already holds
// the lease (it renews, keeping the term) seals with an epoch of the
// term. An epoch of the same term that the Lease hands out meanwhile to a
// push of the shard (a pipeline that ships under its own ctx) lands
// first, and the seal is refused as stale by this holder's own epoch.
// Promise 15: a takeover releases the lease only on a refusal no retry
// changes; the seal is sent again at a new epoch of the term, and lands.
// Promise 18: nobody was deposed, and the pipeline's Deposed context
// lives on.
func TestLeaseHoldSealRacesItsOwnEpoch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		f := &Fence{Store: &MemStore{}}
		a := acquiredHolder(ctx, t, f)
		e, err := a.Epoch(ctx, "wal", "0")
		require.NoError(t, err)
		require.NoError(t, f.Seal(ctx, "wal", "0", "a", e))
		deposed, stop := f.Deposed(ctx, "wal", "0")
		defer stop()

		shard := mustShardKey(t, "wal", "0")
		gate := make(chan struct{})
		var stalled atomic.Bool
		slow := hook.With(ctx, &hook.Hooks{Write: func(ctx context.Context, key string, write func() (string, error)) (string, error) {
			if key == shard && stalled.CompareAndSwap(false, true) {
				select {
				case <-gate:
				case <-ctx.Done():
					return "", ctx.Err()
				}
			}
			return write()
		}})
		held := holdBehind(slow, a, Shard{"wal", "0"})
		synctest.Wait() // the seal's write waits at the gate
		require.True(t, stalled.Load())
		_, err = f.PushFrom(deposed, a, "wal", "0", "a", []byte("segment 1"))
		require.NoError(t, err, "the pipeline's push, at the next epoch of the term")
		close(gate)

		err = <-held
		require.NoError(t, err, "the seal is refused by an epoch of this very term and holder: a fresh epoch would seal")
		require.NoError(t, context.Cause(deposed), "nobody deposed the holder")
		_, err = f.PushFrom(deposed, a, "wal", "0", "a", []byte("segment 2"))
		require.NoError(t, err, "the holder ships on")
	})
}

// acquisitions are the two ways a Lease takes the lease: an Acquire (the
// context it was given back) and a Hold (the context it returns).
var acquisitions = []struct {
	name    string
	acquire func(ctx context.Context, a *Lease) (context.Context, error)
}{
	{"acquire", func(ctx context.Context, a *Lease) (context.Context, error) {
		_, err := a.Acquire(ctx)
		return ctx, err
	}},
	{"hold", func(ctx context.Context, a *Lease) (context.Context, error) { return a.Hold(ctx) }},
}

// TestLeaseEndedHoldKeepsALaterAcquisition: a Release ends a Hold whose
// seal is under way (its write's reply, a cancellation, comes back
// late), and returns; an Acquire, or another Hold, then takes the next
// term. The ended Hold's seal then fails, and the Hold gives up: it
// releases the lease only in the acquisition it made, never in the one
// that came after the Release, which keeps handing out epochs, keeps its
// record, and keeps its Hold's context live.
func TestLeaseEndedHoldKeepsALaterAcquisition(t *testing.T) {
	for _, tt := range acquisitions {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := t.Context()
				store := &MemStore{}
				a := holdLease(&Fence{Store: store}, "a")
				shard := mustShardKey(t, "wal", "0")
				gate := make(chan struct{})
				var stalled atomic.Bool
				slow := hook.With(ctx, &hook.Hooks{Write: func(ctx context.Context, key string, write func() (string, error)) (string, error) {
					if key == shard && stalled.CompareAndSwap(false, true) {
						<-gate // the store answers the cancellation late
						if err := ctx.Err(); err != nil {
							return "", err
						}
					}
					return write()
				}})
				held := holdBehind(slow, a, Shard{"wal", "0"})
				synctest.Wait() // the seal's write waits at the gate
				require.True(t, stalled.Load())

				require.NoError(t, a.Release(ctx), "ends the Hold, releases term 1")
				later, err := tt.acquire(ctx, a)
				require.NoError(t, err)
				close(gate)
				require.ErrorIs(t, <-held, ErrLeaseLost, "the first Hold was released")

				e, err := a.Epoch(ctx, "wal", "0")
				require.NoError(t, err, "the acquisition after the Release holds the lease")
				assert.Equal(t, uint64(2), leaseTerm(e))
				require.NoError(t, later.Err(), "its context is live")
				rec := leaseRecordOf(t, store)
				assert.Equal(t, uint64(2), rec.Term)
				assert.NotZero(t, rec.Expiry, "term 2 is not released")
				require.NoError(t, a.Release(ctx))
			})
		})
	}
}

// TestLeaseReleaseThenFailedAcquisition: after a Release whose ctx ended
// before it could write (the record still shows the lease held), an
// Acquire or a Hold that fails takes nothing, and the Lease still hands
// out no epoch, as Release says; one that lands holds the lease again.
func TestLeaseReleaseThenFailedAcquisition(t *testing.T) {
	for _, tt := range []struct {
		name    string
		acquire func(ctx context.Context, a *Lease) error
	}{
		{"acquire", func(ctx context.Context, a *Lease) error { _, err := a.Acquire(ctx); return err }},
		{"hold", func(ctx context.Context, a *Lease) error { _, err := a.Hold(ctx); return err }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := t.Context()
				a := acquiredHolder(ctx, t, &Fence{Store: &MemStore{}})
				ended, cancel := context.WithCancel(ctx)
				cancel()
				require.ErrorIs(t, a.Release(ended), context.Canceled)
				_, err := a.Epoch(ctx, "wal", "0")
				require.ErrorIs(t, err, ErrLeaseLost, "no epoch after a Release, whatever its outcome")

				require.ErrorIs(t, tt.acquire(ended, a), context.Canceled)
				_, err = a.Epoch(ctx, "wal", "0")
				require.ErrorIs(t, err, ErrLeaseLost, "an acquisition that failed takes nothing")

				require.NoError(t, tt.acquire(ctx, a))
				e, err := a.Epoch(ctx, "wal", "0")
				require.NoError(t, err, "an acquisition that landed holds the lease")
				assert.Equal(t, uint64(1), leaseTerm(e), "renewed: the Release wrote nothing")
				require.NoError(t, a.Release(ctx))
			})
		})
	}
}

// TestLeaseGivenUpHoldBesideARenewal: a Hold whose seal is refused for
// good gives the lease up, releasing its own acquisition; an Acquire of the
// same Lease, begun before and landing after that release began (a
// renewal), is a later acquisition, which the release leaves alone. The
// Lease then holds the lease and hands out its epochs: a release that
// released nothing does not stop them.
func TestLeaseGivenUpHoldBesideARenewal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		a := holdLease(&Fence{Store: &MemStore{}}, "a")
		shard := mustShardKey(t, "wal", "0")
		sealGate, leaseGate := make(chan struct{}), make(chan struct{})
		var sealStalled, leaseArmed atomic.Bool
		slow := hook.With(ctx, &hook.Hooks{Write: func(ctx context.Context, key string, write func() (string, error)) (string, error) {
			switch {
			case key == shard && sealStalled.CompareAndSwap(false, true):
				<-sealGate
				return "", &StoreError{Op: "mem put", Key: key, Err: fs.ErrPermission}
			case key != shard && leaseArmed.CompareAndSwap(true, false):
				<-leaseGate
			}
			return write()
		}})
		held := holdBehind(slow, a, Shard{"wal", "0"})
		synctest.Wait() // the seal's write waits at its gate
		require.True(t, sealStalled.Load())

		leaseArmed.Store(true)
		acquired := make(chan error, 1)
		go func() {
			_, err := a.Acquire(slow)
			acquired <- err
		}()
		synctest.Wait() // the renewal's write waits at its gate, holding the record
		close(sealGate) // the seal is refused; the Hold gives up and waits to release
		synctest.Wait()
		close(leaseGate)

		require.NoError(t, <-acquired)
		require.ErrorIs(t, <-held, fs.ErrPermission)
		e, err := a.Epoch(ctx, "wal", "0")
		require.NoError(t, err, "the renewal holds the lease, and no Release was called")
		assert.Equal(t, uint64(1), leaseTerm(e))
	})
}

// writeGate holds the first write made under the context gateWrites
// returns once armed, until open is closed or the write's context ends;
// arrived is closed when that write arrives.
type writeGate struct {
	armed         atomic.Bool
	open, arrived chan struct{}
}

func gateWrites(ctx context.Context) (context.Context, *writeGate) {
	g := &writeGate{open: make(chan struct{}), arrived: make(chan struct{})}
	return hook.With(ctx, &hook.Hooks{Write: func(ctx context.Context, _ string, write func() (string, error)) (string, error) {
		if g.armed.CompareAndSwap(true, false) {
			close(g.arrived)
			select {
			case <-g.open:
			case <-ctx.Done():
				return "", ctx.Err()
			}
		}
		return write()
	}}), g
}

// behindARenewal holds the Lease's writes with a Renew of a under ctx,
// at gate (armed here), and starts take behind it; it returns once both
// wait, with the channels their results will come on. The caller runs it
// in a synctest bubble, and opens the gate.
func behindARenewal(ctx context.Context, gate *writeGate, a *Lease, take func() error) (renewed, taken <-chan error) {
	r, tk := make(chan error, 1), make(chan error, 1)
	gate.armed.Store(true)
	go func() { r <- a.Renew(ctx) }()
	synctest.Wait() // the renewal holds the Lease's writes
	go func() { tk <- take() }()
	synctest.Wait() // take waits for them
	return r, tk
}

// holdBehind runs a.Hold(ctx, shards...) in a goroutine of its own and
// hands its error over once it returns.
func holdBehind(ctx context.Context, a *Lease, shards ...Shard) <-chan error {
	held := make(chan error, 1)
	go func() {
		_, err := a.Hold(ctx, shards...)
		held <- err
	}()
	return held
}

// TestLeaseTakenBeforeAReleaseThatEnded: a Hold of no shard, or an
// Acquire, begins while a Renew holds the Lease's writes; a Release begins
// after it and ends at once (its ctx is done), before the acquisition
// lands. Release: no epoch after it until an acquisition begun after it
// lands, so this one cannot hand one out; promise 16: a Hold is then not
// in force. The call gives its acquisition up and returns ErrLeaseLost,
// holding nothing: no context left live and renewing while every Epoch is
// refused, and another Lease takes the lease at once instead of waiting
// out a term nobody renews.
func TestLeaseTakenBeforeAReleaseThatEnded(t *testing.T) {
	for _, tt := range acquisitions {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, gate := gateWrites(t.Context())
				store := &MemStore{}
				a := acquiredHolder(ctx, t, &Fence{Store: store})

				renewed, taken := behindARenewal(ctx, gate, a, func() error { _, err := tt.acquire(ctx, a); return err })
				ended, cancel := context.WithCancel(ctx)
				cancel()
				require.ErrorIs(t, a.Release(ended), context.Canceled)
				close(gate.open)
				require.NoError(t, <-renewed)

				require.ErrorIs(t, <-taken, ErrLeaseLost, "begun before the Release: it hands out no epoch, so it is not in force")
				_, err := a.Epoch(ctx, "wal", "0")
				require.ErrorIs(t, err, ErrLeaseLost)
				assert.Zero(t, leaseRecordOf(t, store).Expiry, "released")
				_, err = holdLease(&Fence{Store: store}, "b").Acquire(ctx)
				require.NoError(t, err, "the acquisition was given up: another Lease takes the lease at once")
			})
		})
	}
}

// TestLeaseHoldGivenUpKeepsALaterAcquisition: a Hold begins while a Renew
// holds the Lease's writes; a Release begins after it and ends at once
// (its ctx is done), and an acquisition begun after the Release (an
// Acquire, or another Hold) waits behind the Hold. The first Hold's
// acquisition lands after the Release began, so it gives it up; the later
// acquisition lands before that give-up's release can write, and the
// give-up leaves it alone: it hands out epochs, its record stays held, and
// a later Hold's context stays live. The given-up Hold was never in force,
// so a later Hold is never refused as a second one. The later acquisition
// and the give-up run side by side: each case runs leaseRounds times, to
// meet their interleavings.
func TestLeaseHoldGivenUpKeepsALaterAcquisition(t *testing.T) {
	for _, tt := range acquisitions {
		t.Run(tt.name, func(t *testing.T) {
			for range leaseRounds {
				if t.Failed() {
					return
				}
				synctest.Test(t, func(t *testing.T) {
					ctx, gate := gateWrites(t.Context())
					store := &MemStore{}
					a := acquiredHolder(ctx, t, &Fence{Store: store})

					renewed, held := behindARenewal(ctx, gate, a, func() error { _, err := a.Hold(ctx); return err })

					ended, cancel := context.WithCancel(ctx)
					cancel()
					require.ErrorIs(t, a.Release(ended), context.Canceled)
					type result struct {
						ctx context.Context
						err error
					}
					later := make(chan result, 1)
					go func() {
						c, err := tt.acquire(ctx, a)
						later <- result{c, err}
					}()
					synctest.Wait() // the later acquisition waits behind the Hold
					close(gate.open)
					require.NoError(t, <-renewed)

					require.ErrorIs(t, <-held, ErrLeaseLost, "the Hold began before the Release")
					l := <-later
					require.NoError(t, l.err, "begun after the Release: the given-up Hold was never in force")
					e, err := a.Epoch(ctx, "wal", "0")
					require.NoError(t, err, "the acquisition begun after the Release holds the lease")
					assert.Equal(t, uint64(1), leaseTerm(e), "renewed: nothing released term 1")
					require.NoError(t, l.ctx.Err(), "its context is live")
					rec := leaseRecordOf(t, store)
					assert.Equal(t, uint64(1), rec.Term)
					assert.NotZero(t, rec.Expiry, "term 1 is not released")
					_, err = holdLease(&Fence{Store: store}, "b").Acquire(ctx)
					var heldErr *LeaseHeldError
					require.ErrorAs(t, err, &heldErr, "the later acquisition holds the record")
					require.NoError(t, a.Release(ctx))
				})
			}
		})
	}
}

// leaseRounds is how many times a test of calls that run side by side
// runs its case, to meet their interleavings.
const leaseRounds = 500

// TestLeaseHoldOfAShardGivenUpSealsNothing: a Hold of a shard begins
// while a Renew holds the Lease's writes, and a Release begins after it
// and waits too. The Hold's acquisition lands after the Release began: it
// seals nothing and returns ErrLeaseLost, and the Release releases the
// lease, deposing nobody.
func TestLeaseHoldOfAShardGivenUpSealsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, gate := gateWrites(t.Context())
		store := &MemStore{}
		f := &Fence{Store: store}
		a := acquiredHolder(ctx, t, f)
		deposed, stop := f.Deposed(ctx, "wal", "0")
		defer stop()

		renewed, held := behindARenewal(ctx, gate, a, func() error { _, err := a.Hold(ctx, Shard{"wal", "0"}); return err })
		released := make(chan error, 1)
		go func() { released <- a.Release(ctx) }()
		synctest.Wait() // and the Release too
		close(gate.open)
		require.NoError(t, <-renewed)

		require.ErrorIs(t, <-held, ErrLeaseLost, "the Hold's acquisition landed after the Release began")
		require.NoError(t, <-released)
		_, _, err := store.Get(ctx, mustShardKey(t, "wal", "0"))
		require.ErrorIs(t, err, ErrNotFound, "the given-up Hold sealed nothing")
		require.NoError(t, deposed.Err(), "releasing deposes nobody")
		_, err = a.Epoch(ctx, "wal", "0")
		require.ErrorIs(t, err, ErrLeaseLost)
		rec := leaseRecordOf(t, store)
		assert.Zero(t, rec.Expiry, "released")
		_, err = holdLease(&Fence{Store: store}, "b").Acquire(ctx)
		require.NoError(t, err, "released: another Lease takes the lease at once")
	})
}

// TestLeaseGivenUpWhoseReleaseFails: a Hold or an Acquire whose
// acquisition lands after a Release began gives it up, and the give-up's
// release is refused (credentials that may not write the record): the
// call returns ErrLeaseLost, says the release failed and when the term
// lapses, and no epoch is handed out; the record shows the lease held
// until then.
func TestLeaseGivenUpWhoseReleaseFails(t *testing.T) {
	for name, take := range map[string]func(ctx context.Context, a *Lease) error{
		"hold":    func(ctx context.Context, a *Lease) error { _, err := a.Hold(ctx); return err },
		"acquire": func(ctx context.Context, a *Lease) error { _, err := a.Acquire(ctx); return err },
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				gate := make(chan struct{})
				var writes atomic.Int32
				ctx := hook.With(t.Context(), &hook.Hooks{Write: func(ctx context.Context, _ string, write func() (string, error)) (string, error) {
					switch writes.Add(1) {
					case 2: // the Renew's: held until the Release has begun and ended
						select {
						case <-gate:
						case <-ctx.Done():
							return "", ctx.Err()
						}
					case 4: // the give-up's release
						return "", fmt.Errorf("denied: %w", fs.ErrPermission)
					}
					return write()
				}})
				store := &MemStore{}
				a := acquiredHolder(ctx, t, &Fence{Store: store})

				renewed := make(chan error, 1)
				go func() { renewed <- a.Renew(ctx) }()
				synctest.Wait()
				taken := make(chan error, 1)
				go func() { taken <- take(ctx, a) }()
				synctest.Wait()
				ended, cancel := context.WithCancel(ctx)
				cancel()
				require.ErrorIs(t, a.Release(ended), context.Canceled)
				close(gate)
				require.NoError(t, <-renewed)

				err := <-taken
				require.ErrorIs(t, err, ErrLeaseLost)
				assert.Contains(t, err.Error(), "release failed")
				assert.Contains(t, err.Error(), "the term lapses at")
				_, err = a.Epoch(ctx, "wal", "0")
				require.ErrorIs(t, err, ErrLeaseLost, "no epoch of the given-up acquisition")
				assert.NotZero(t, leaseRecordOf(t, store).Expiry, "the record shows the lease held")
				assert.EqualValues(t, 4, writes.Load(), "the release was tried once: a refusal is final")
			})
		})
	}
}

// TestLeaseAcquireBegunBeforeAReleaseThatWaits: as
// TestLeaseHoldOfAShardGivenUpSealsNothing, for an Acquire of a Lease that
// holds the lease (a renewal): it begins while a Renew holds the Lease's
// writes, and a Release begins after it and waits too. The renewal lands
// after the Release began, so the Acquire gives it up and returns
// ErrLeaseLost; the Release, begun while the Lease held the lease,
// releases it and returns nil. No epoch after, and another Lease takes
// the lease at once, at the next term.
func TestLeaseAcquireBegunBeforeAReleaseThatWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, gate := gateWrites(t.Context())
		store := &MemStore{}
		a := acquiredHolder(ctx, t, &Fence{Store: store})

		renewed, acquired := behindARenewal(ctx, gate, a, func() error { _, err := a.Acquire(ctx); return err })
		released := make(chan error, 1)
		go func() { released <- a.Release(ctx) }()
		synctest.Wait() // and the Release too
		close(gate.open)
		require.NoError(t, <-renewed)

		require.ErrorIs(t, <-acquired, ErrLeaseLost, "the Acquire's renewal landed after the Release began")
		require.NoError(t, <-released, "the Release began while the Lease held the lease")
		_, err := a.Epoch(ctx, "wal", "0")
		require.ErrorIs(t, err, ErrLeaseLost)
		rec := leaseRecordOf(t, store)
		assert.Zero(t, rec.Expiry, "released")
		assert.Equal(t, uint64(1), rec.Term)
		term, err := holdLease(&Fence{Store: store}, "b").Acquire(ctx)
		require.NoError(t, err, "released: another Lease takes the lease at once")
		assert.Equal(t, uint64(2), term)
	})
}
