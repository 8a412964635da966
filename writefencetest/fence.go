package writefencetest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/defaults"
	"github.com/writefence/writefence/internal/hook"
	"github.com/writefence/writefence/internal/keys"
)

// The checks of a Fence over the store that need the caller's help: its
// traffic counted (Options.Wire), and a wrapper over it of the caller's
// type (Options.Wrap).

// testFenceReads pushes a record much larger than a header through
// Fences on the store, counting the store's traffic: a fresh Fence's push
// reads the head of the record it replaces (at most a header's bytes),
// never its payload, and writes; a fresh Fence's stale push reads the
// header alone, in one round trip; the Fence that wrote last pushes again
// with the write alone. A store that declares no PrefixReader reads records
// whole, and is not checked.
func testFenceReads(t *testing.T, sc *scope) {
	w := sc.opts.Wire
	if w == nil {
		t.Skip("Options.Wire is not set: the suite cannot count the store's traffic")
	}
	if own, _ := declared[writefence.PrefixReader](sc.s); !own {
		t.Skip("the store does not declare writefence.PrefixReader (writefence.Capable): a Fence reads its records whole")
	}
	writeTrips := max(w.WriteTrips, 1)
	ctx := t.Context()
	prefix := sc.prefix + "reads/"
	key, err := keys.Shard(prefix, "wal", "0")
	if err != nil {
		t.Fatalf("keys.Shard: %v", err)
	}
	sc.track(key)
	size := int64(largePayload)
	if limit := sc.sizeLimit(t); limit > 0 {
		size = min(size, limit-2*defaults.MaxHeaderSize)
	}
	big := patterned(int(size), 'R')
	fresh := func() *writefence.Fence { return &writefence.Fence{Store: sc.s, Prefix: prefix} }
	if err := fresh().Push(ctx, "wal", "0", "a", 1, big); err != nil {
		t.Fatalf("Push of a %d-byte payload at 1: %v", size, err)
	}
	measure := func(what string, f func() error) (int64, int64) {
		t.Helper()
		trips0, read0 := w.Count()
		if err := f(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		trips, read := w.Count()
		t.Logf("%s: %d round trips, %d bytes read", what, trips-trips0, read-read0)
		return trips - trips0, read - read0
	}

	last := fresh()
	trips, read := measure("a fresh Fence's push", func() error { return last.Push(ctx, "wal", "0", "b", 2, big) })
	if trips != 1+writeTrips {
		t.Errorf("a fresh Fence's push over a %d-byte record made %d round trips; want %d: a header read, the write", size, trips, 1+writeTrips)
	}
	if read > defaults.MaxHeaderSize+2*w.Slack {
		t.Errorf("a fresh Fence's push over a %d-byte record read %d bytes; want the head of the record it replaces alone, at most %d (and %d bytes of slack)", size, read, defaults.MaxHeaderSize, 2*w.Slack)
	}

	trips, read = measure("a fresh Fence's stale push", func() error {
		if err := fresh().Push(ctx, "wal", "0", "c", 2, big); !errors.Is(err, writefence.ErrStaleEpoch) {
			return fmt.Errorf("a stale push: %v; want an error matching writefence.ErrStaleEpoch", err)
		}
		return nil
	})
	if trips != 1 {
		t.Errorf("a fresh Fence's stale push made %d round trips; want 1, the header read alone", trips)
	}
	if read > defaults.MaxHeaderSize+w.Slack {
		t.Errorf("a fresh Fence's stale push read %d bytes; want a header's at most, %d (and %d bytes of slack)", read, defaults.MaxHeaderSize, w.Slack)
	}

	trips, read = measure("a steady push", func() error { return last.Push(ctx, "wal", "0", "b", 3, big) })
	if trips != writeTrips {
		t.Errorf("the push of the Fence that wrote last made %d round trips; want %d, the write alone", trips, writeTrips)
	}
	if read > w.Slack {
		t.Errorf("the push of the Fence that wrote last read %d bytes; want none (and %d bytes of slack)", read, w.Slack)
	}

	epoch, writer, payload, err := fresh().Latest(ctx, "wal", "0")
	if err != nil || epoch != 3 || writer != "b" || string(payload) != string(big) {
		t.Errorf("Latest returned epoch %d by %q, %s, %v; want epoch 3 by %q, the %d bytes pushed", epoch, writer, describe(payload), err, "b", size)
	}
}

// Overrides is what the overrides of Get and PutIfVersion in a wrapper of
// Options.Wrap do: each calls Overrides' method of its name with the
// wrapped store's, which counts the call and passes it on, or refuses it
// when Fence/Overrides asks it to. Its zero value passes every call on.
type Overrides struct {
	refuseGets, refusePuts atomic.Bool
	gets, puts             atomic.Int64
}

// errOverrideRefused is an override's refusal: a failure a Fence retries,
// as it would a store's, through the wrapper again.
var errOverrideRefused = errors.New("writefencetest: refused by the wrapper's override")

// Get is the wrapper's Get: it counts the call and calls next, the
// wrapped store's Get, unless the check has it refuse reads.
func (o *Overrides) Get(ctx context.Context, key string, next func(context.Context, string) ([]byte, string, error)) ([]byte, string, error) {
	o.gets.Add(1)
	if o.refuseGets.Load() {
		return nil, "", errOverrideRefused
	}
	return next(ctx, key)
}

// PutIfVersion is the wrapper's PutIfVersion: it counts the call and
// calls next, the wrapped store's PutIfVersion, unless the check has it
// refuse writes.
func (o *Overrides) PutIfVersion(ctx context.Context, key string, data []byte, expectVersion string,
	next func(context.Context, string, []byte, string) (string, error)) (string, error) {
	o.puts.Add(1)
	if o.refusePuts.Load() {
		return "", errOverrideRefused
	}
	return next(ctx, key, data, expectVersion)
}

// engineTrace counts the reads and writes a Fence's write engine makes
// under a context, and skips its back-offs.
type engineTrace struct{ reads, writes atomic.Int64 }

func traced(ctx context.Context) (context.Context, *engineTrace) {
	tr := &engineTrace{}
	return hook.With(ctx, &hook.Hooks{
		Read: func(context.Context, string) error { tr.reads.Add(1); return nil },
		Write: func(_ context.Context, _ string, write func() (string, error)) (string, error) {
			tr.writes.Add(1)
			return write()
		},
		Wait: func(context.Context, int, time.Duration) error { return nil },
	}), tr
}

// contents returns every key under prefix with its version and bytes.
func contents(ctx context.Context, t *testing.T, s writefence.ConditionalStore, l writefence.Lister, prefix string) map[string]string {
	t.Helper()
	got := map[string]string{}
	if err := l.List(ctx, prefix, func(key string) error {
		data, v, err := s.Get(ctx, key)
		if err != nil {
			return fmt.Errorf("Get(%q): %w", key, err)
		}
		got[key] = v + " " + string(data)
		return nil
	}); err != nil {
		t.Fatalf("List(%q): %v", prefix, err)
	}
	return got
}

// overridesAttempts is the MaxAttempts of the Fence Fence/Overrides runs.
const overridesAttempts = 3

// testFenceOverrides checks that a store embedding the store under test
// and overriding its Get and PutIfVersion (Options.Wrap) is used through
// its overrides, never through the capabilities it inherits (GetPrefix,
// PutPartsIfVersion, PutIfBranded), by every write of a Fence (Push,
// Update, Seal, Settle, Lease.Acquire, ClaimBrand) and every read, with no
// brand check and with BrandVerifyAlways. With its PutIfVersion refusing,
// every write attempt the engine makes (MaxAttempts of them) reaches the
// override and the operation fails with the override's error; with its
// Get refusing, every read does, and nothing is written. Either way the
// store is unchanged.
func testFenceOverrides(t *testing.T, sc *scope) {
	if sc.opts.Wrap == nil {
		t.Skip("Options.Wrap is not set: the suite cannot embed the store in a wrapper of its own")
	}
	l, ok := sc.s.(writefence.Lister)
	if !ok {
		t.Skip("the store does not implement writefence.Lister: the suite cannot see that nothing was written")
	}
	o := new(Overrides)
	wrapped := sc.opts.Wrap(sc.s, o)
	for _, brand := range []writefence.BrandMode{0, writefence.BrandVerifyAlways} {
		name := map[writefence.BrandMode]string{0: "no brand", writefence.BrandVerifyAlways: "brand verified in every write"}[brand]
		t.Run(name, func(t *testing.T) { testOverridden(t, sc, l, wrapped, o, brand) })
	}
}

// testOverridden is Fence/Overrides under one brand mode.
func testOverridden(t *testing.T, sc *scope, l writefence.Lister, wrapped writefence.ConditionalStore, o *Overrides, brand writefence.BrandMode) {
	ctx := t.Context()
	prefix := sc.prefix + "overrides/" + strconv.Itoa(int(brand)) + "/"
	direct := &writefence.Fence{Store: sc.s, Prefix: prefix}
	if err := direct.Push(ctx, "wal", "0", "w", 3, []byte("recorded at 3")); err != nil {
		t.Fatalf("Push: %v", err)
	}
	damagedKey, err := keys.Shard(prefix, "wal", "damaged")
	if err != nil {
		t.Fatalf("keys.Shard: %v", err)
	}
	put(t, sc.s, damagedKey, []byte("no record"), "")
	info, err := direct.Inspect(ctx, "wal", "damaged")
	if !errors.Is(err, writefence.ErrCorrupt) {
		t.Fatalf("Inspect of a key that holds no record: %v; want an error matching writefence.ErrCorrupt", err)
	}
	if brand != 0 {
		if _, err := direct.ClaimBrand(ctx); err != nil {
			t.Fatalf("ClaimBrand: %v", err)
		}
	}
	before := contents(ctx, t, sc.s, l, prefix)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		for k := range contents(ctx, t, sc.s, l, prefix) {
			sc.track(k)
		}
	})

	f := &writefence.Fence{Store: wrapped, Prefix: prefix, Brand: brand, MaxAttempts: overridesAttempts}
	type op struct {
		name  string
		write bool
		run   func(ctx context.Context) error
	}
	ops := []op{
		{"push", true, func(ctx context.Context) error { return f.Push(ctx, "wal", "0", "w", 7, []byte("pushed")) }},
		{"update", true, func(ctx context.Context) error {
			return f.Update(ctx, "wal", "0", "w", 7, func(cur []byte) ([]byte, error) { return append(cur, '+'), nil })
		}},
		{"seal", true, func(ctx context.Context) error { return f.Seal(ctx, "wal", "0", "w", 7) }},
		{"settle", true, func(ctx context.Context) error {
			return f.Settle(ctx, "wal", "damaged", writefence.Settlement{Version: info.Version, Writer: "op", Epoch: 9, Payload: []byte("settled"), Floor: 1})
		}},
		{"lease acquire", true, func(ctx context.Context) error {
			_, err := (&writefence.Lease{Fence: f, Name: "lease", Holder: "h", TTL: time.Minute}).Acquire(ctx)
			return err
		}},
		{"latest", false, func(ctx context.Context) error { _, _, _, err := f.Latest(ctx, "wal", "0"); return err }},
		{"inspect", false, func(ctx context.Context) error { _, err := f.Inspect(ctx, "wal", "0"); return err }},
	}
	if brand == 0 {
		// Under a brand the store is claimed already: nothing to write.
		ops = append(ops, op{"claim brand", true, func(ctx context.Context) error { _, err := f.ClaimBrand(ctx); return err }})
	}
	for _, mode := range []string{"put refused", "get refused"} {
		for _, c := range ops {
			if mode == "put refused" && !c.write {
				continue
			}
			o.refusePuts.Store(mode == "put refused")
			o.refuseGets.Store(mode == "get refused")
			gets0, puts0 := o.gets.Load(), o.puts.Load()
			tctx, tr := traced(ctx)
			err := c.run(tctx)
			o.refusePuts.Store(false)
			o.refuseGets.Store(false)
			gets, puts := o.gets.Load()-gets0, o.puts.Load()-puts0
			reads, writes := tr.reads.Load(), tr.writes.Load()
			what := fmt.Sprintf("%s with the wrapper's %s", c.name, mode)
			t.Logf("%s: %d reads, %d writes by the engine; %d gets, %d puts by the wrapper: %v", what, reads, writes, gets, puts, err)
			if !errors.Is(err, errOverrideRefused) {
				t.Errorf("%s: %v; want the override's refusal: the wrapper's override was not used", what, err)
			}
			if mode == "put refused" {
				if writes != overridesAttempts || puts != writes {
					t.Errorf("%s: the engine made %d writes, the wrapper's PutIfVersion saw %d; want %d, every attempt through the override", what, writes, puts, overridesAttempts)
				}
				// Under BrandVerifyAlways the brand read before each
				// write is one of the engine's reads too.
				wantReads := int64(overridesAttempts)
				if brand == writefence.BrandVerifyAlways {
					wantReads = 2 * overridesAttempts
				}
				if reads < wantReads || gets != reads {
					t.Errorf("%s: the engine made %d reads, the wrapper's Get saw %d; want at least %d, every one through Get", what, reads, gets, wantReads)
				}
			} else {
				// A write retries its read, and so do Latest and Inspect;
				// under a brand these read the brand first (the engine's
				// one read of the brand), which is refused, and retry
				// that read as often.
				wantReads := int64(overridesAttempts)
				if reads != wantReads || gets != reads {
					t.Errorf("%s: the engine made %d reads, the wrapper's Get saw %d; want %d reads, every one through the override", what, reads, gets, wantReads)
				}
				if writes != 0 || puts != 0 {
					t.Errorf("%s: the engine made %d writes, the wrapper's PutIfVersion saw %d; want none", what, writes, puts)
				}
			}
			if after := contents(ctx, t, sc.s, l, prefix); !maps.Equal(after, before) {
				t.Errorf("%s changed the store: %v, then %v", what, before, after)
			}
		}
	}
}
