package writefence

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence/internal/hook"
	"github.com/writefence/writefence/internal/keys"
	"github.com/writefence/writefence/internal/record"
	"github.com/writefence/writefence/internal/testserver"
)

// The tests of Hold run in a synctest bubble: time.Now, the renewer's
// timers and the engine's back-offs all run on the bubble's clock, which
// moves only when every goroutine of the test is blocked, so "the moment
// the lease expires" is an exact instant and every test is deterministic.

// cutStore is a store a test can cut off from one holder, as a network
// partition would: while cut, every read and write fails.
type cutStore struct {
	ConditionalStore
	cut atomic.Bool
}

var errCut = errors.New("store unreachable")

func (s *cutStore) Get(ctx context.Context, key string) ([]byte, string, error) {
	if s.cut.Load() {
		return nil, "", errCut
	}
	return s.ConditionalStore.Get(ctx, key)
}

func (s *cutStore) PutIfVersion(ctx context.Context, key string, data []byte, expect string) (string, error) {
	if s.cut.Load() {
		return "", errCut
	}
	return s.ConditionalStore.PutIfVersion(ctx, key, data, expect)
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
				a := holdLease(f, "a")
				_, err := a.Acquire(ctx)
				require.NoError(t, err)
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
		ctx := t.Context()
		link := &cutStore{ConditionalStore: &MemStore{}}
		f := &Fence{Store: link}
		a := holdLease(f, "a")
		start := time.Now()
		held, err := a.Hold(ctx, Shard{"wal", "0"})
		require.NoError(t, err)
		d0, stop := f.Deposed(ctx, "wal", "0")
		defer stop()
		link.cut.Store(true)

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

		link.cut.Store(false)
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
