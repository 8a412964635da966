package fakestore_test

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/fakestore"
)

// everything is a MemStore that also declares a PrefixReader and a
// BrandedPutter: a store with every capability a Store can offer.
type everything struct{ *writefence.MemStore }

func (e everything) Capabilities() writefence.ConditionalStore { return e }

func (e everything) GetPrefix(ctx context.Context, key string, n int64) ([]byte, int64, string, error) {
	return fakestore.GetPrefixOf(e.MemStore)(ctx, key, n)
}

func (e everything) PutIfBranded(ctx context.Context, brandKey, identity, key string, parts [][]byte, expect string) (string, error) {
	return writefence.PutIfBranded(ctx, e.MemStore, brandKey, identity, key, parts, expect)
}

// declares reports whether s declares C as its own, as writefence's
// helpers decide it.
func declares[C any](s writefence.ConditionalStore) bool {
	c, ok := s.(writefence.Capable)
	_, has := s.(C)
	return ok && has && c.Capabilities() == s
}

// offers returns the capabilities s offers, as the Caps of fakestore.
func offers(s writefence.ConditionalStore) fakestore.Caps {
	var has fakestore.Caps
	_, d := s.(writefence.Deleter)
	_, l := s.(writefence.Lister)
	if d != l {
		panic("a Deleter without a Lister, or the other way round")
	}
	for c, ok := range map[fakestore.Caps]bool{
		fakestore.DeleterLister:        d,
		fakestore.PrefixReader:         declares[writefence.PrefixReader](s),
		fakestore.BrandedPutter:        declares[writefence.BrandedPutter](s),
		fakestore.BlobStore:            declares[writefence.BlobStore](s) && declares[writefence.BlobWriter](s),
		fakestore.ConsistentBlobLister: declares[writefence.ConsistentBlobLister](s),
		fakestore.BlobBatchDeleter:     declares[writefence.BlobBatchDeleter](s),
	} {
		if ok {
			has |= c
		}
	}
	return has
}

// TestOffersExactlyWhatIsAsked: over a store with every capability, a
// Store offers each set of them that Hide leaves (a blob capability only
// with BlobStore), declares a PartsPutter exactly when it declares any,
// and over a store that declares nothing offers nothing beyond what a
// replacement adds.
func TestOffersExactlyWhatIsAsked(t *testing.T) {
	inner := everything{&writefence.MemStore{}}
	blobExtras := fakestore.ConsistentBlobLister | fakestore.BlobBatchDeleter
	for hide := range fakestore.All + 1 {
		want := fakestore.All &^ hide
		if want&fakestore.BlobStore == 0 {
			want &^= blobExtras
		}
		s := fakestore.New(inner, fakestore.Options{Hide: hide})
		if got := offers(s); got != want {
			t.Errorf("Hide %#x: offers %#x, want %#x", hide, got, want)
		}
		if got, want := declares[writefence.PartsPutter](s), want&fakestore.Declared != 0; got != want {
			t.Errorf("Hide %#x: declares a PartsPutter: %v, want %v", hide, got, want)
		}
	}

	bare := struct{ writefence.ConditionalStore }{&writefence.MemStore{}}
	if got := offers(fakestore.New(bare, fakestore.Options{})); got != 0 {
		t.Errorf("over a bare store: offers %#x", got)
	}
	s := fakestore.New(bare, fakestore.Options{
		GetPrefix: inner.GetPrefix, PutIfBranded: inner.PutIfBranded,
	})
	if got, want := offers(s), fakestore.PrefixReader|fakestore.BrandedPutter; got != want {
		t.Errorf("with replacements: offers %#x, want %#x", got, want)
	}
}

// TestCallsReachTheWrappedStore: every method of a Store reaches the
// wrapped store's, and each call is counted, by key too.
func TestCallsReachTheWrappedStore(t *testing.T) {
	ctx := t.Context()
	mem := &writefence.MemStore{}
	s := fakestore.New(everything{mem}, fakestore.Options{ByKey: true})
	v, err := writefence.PutParts(ctx, s, "k", [][]byte{[]byte("he"), []byte("llo")}, "")
	must(t, err)
	data, v2, err := mem.Get(ctx, "k")
	must(t, err)
	if string(data) != "hello" || v2 != v {
		t.Fatalf("the wrapped store holds %q at %q, want hello at %q", data, v2, v)
	}
	prefix, size, _, err := writefence.GetPrefix(ctx, s, "k", 2)
	must(t, err)
	if string(prefix) != "he" || size != 5 {
		t.Errorf("GetPrefix: %q, %d", prefix, size)
	}
	if _, _, err := s.Get(ctx, "k"); err != nil || s.BytesRead() != 2+5 {
		t.Errorf("Get: %v; %d bytes read by it and GetPrefix, want 7", err, s.BytesRead())
	}
	_, err = s.PutIfVersion(ctx, "k", []byte("x"), "stale")
	if !errors.Is(err, writefence.ErrConflict) {
		t.Errorf("a stale write: %v", err)
	}
	n, err := writefence.WriteBlob(ctx, s, "blob", strings.NewReader("blob"))
	must(t, err)
	if _, err := mem.StatBlob(ctx, "blob"); err != nil || n != 4 {
		t.Errorf("WriteBlob: %d, %v", n, err)
	}
	deleted, err := writefence.DeleteBlobs(ctx, s, []string{"blob", "none"})
	must(t, err)
	slices.Sort(deleted)
	if !slices.Equal(deleted, []string{"blob", "none"}) {
		t.Errorf("DeleteBlobs: %q", deleted)
	}
	must(t, s.(writefence.Deleter).Delete(ctx, "k"))
	if _, _, err := mem.Get(ctx, "k"); !errors.Is(err, writefence.ErrNotFound) {
		t.Errorf("Delete left %v", err)
	}

	for _, c := range []struct {
		op        fakestore.Op
		calls, ok int64
	}{{fakestore.Put, 2, 1}, {fakestore.GetPrefix, 1, 1}, {fakestore.CreateBlob, 1, 1}, {fakestore.DeleteBlobs, 1, 1}, {fakestore.Delete, 1, 1}, {fakestore.Get, 1, 1}} {
		if got := [2]int64{s.Calls(c.op), s.OK(c.op)}; got != [2]int64{c.calls, c.ok} {
			t.Errorf("%v: calls and OK %v, want %v", c.op, got, [2]int64{c.calls, c.ok})
		}
	}
	if got := s.Calls(fakestore.DeleteBlobs, "none"); got != 1 {
		t.Errorf("DeleteBlobs of none: %d calls", got)
	}
	if got := s.Keys(fakestore.Put); !slices.Equal(got, []string{"k"}) {
		t.Errorf("keys written: %q", got)
	}
}

// TestFaults: a fault fails the calls it applies to before they reach the
// store, or loses the reply of those that succeed, for Times calls of
// its key; a gate holds them until it opens or their ctx ends.
func TestFaults(t *testing.T) {
	ctx := t.Context()
	mem := &writefence.MemStore{}
	errDown := errors.New("down")
	s := fakestore.New(mem, fakestore.Options{ByKey: true, Faults: []fakestore.Fault{
		{Op: fakestore.Put, Key: "a", Times: 2, Err: errDown},
		{Op: fakestore.Put, Times: 1, Err: fakestore.ErrLostReply, Lost: true},
	}})
	for i, want := range []error{errDown, errDown, fakestore.ErrLostReply, nil} {
		_, v, _ := mem.Get(ctx, "a") // "" while a is absent
		if _, err := s.PutIfVersion(ctx, "a", []byte{byte(i)}, v); err != want {
			t.Errorf("write %d: %v, want %v", i, err, want)
		}
	}
	if got := [2]int64{s.Calls(fakestore.Put, "a"), s.OK(fakestore.Put, "a")}; got != [2]int64{4, 2} {
		t.Errorf("calls and landed writes: %v, want [4 2]", got)
	}

	s.Inject(fakestore.Fault{Op: fakestore.Get, Err: errDown})
	for range 3 {
		if _, _, err := s.Get(ctx, "a"); err != errDown {
			t.Fatalf("Get under a fault of every call: %v", err)
		}
	}
	s.Clear(fakestore.Get)
	if _, _, err := s.Get(ctx, "a"); err != nil {
		t.Fatalf("Get once cleared: %v", err)
	}

	gate := &fakestore.Gate{}
	s.Inject(fakestore.Fault{Op: fakestore.Get, Times: 1, Gate: gate})
	done := make(chan error)
	go func() {
		_, _, err := s.Get(ctx, "a")
		done <- err
	}()
	<-gate.Arrived()
	select {
	case err := <-done:
		t.Fatalf("a held Get returned %v before the gate opened", err)
	default:
	}
	gate.Open()
	must(t, <-done)

	held, cancel := context.WithCancel(ctx)
	s.Inject(fakestore.Fault{Op: fakestore.Get, Gate: &fakestore.Gate{}})
	cancel()
	if _, _, err := s.Get(held, "a"); err != context.Canceled {
		t.Errorf("a Get held at a gate, its ctx ended: %v", err)
	}
}

// TestHooks: Before sees each call and may end it before the store;
// After sees its error and decides what the caller sees; a replaced
// listing lists what its replacement does.
func TestHooks(t *testing.T) {
	ctx := t.Context()
	mem := &writefence.MemStore{}
	_, err := mem.CreateBlob(ctx, "b", strings.NewReader("x"))
	must(t, err)
	errRefused := errors.New("refused")
	var seen []string
	s := fakestore.New(mem, fakestore.Options{
		Before: func(_ context.Context, c fakestore.Call) error {
			seen = append(seen, c.Op.String()+" "+c.Key+" "+string(c.Data()))
			if c.Key == "refused" {
				return errRefused
			}
			return nil
		},
		After: func(_ context.Context, c fakestore.Call, err error) error {
			if c.Op == fakestore.Put && err == nil {
				return fakestore.ErrLostReply
			}
			return err
		},
		ListBlobsConsistent: func(context.Context, string, string, func(writefence.BlobInfo) error) error { return nil },
	})
	if _, err := s.PutIfVersion(ctx, "k", []byte("v"), ""); err != fakestore.ErrLostReply {
		t.Errorf("a write After loses: %v", err)
	}
	if _, _, err := mem.Get(ctx, "k"); err != nil {
		t.Errorf("the write whose reply After lost did not land: %v", err)
	}
	if _, _, err := s.Get(ctx, "refused"); err != errRefused {
		t.Errorf("a read Before refuses: %v", err)
	}
	n := 0
	must(t, s.(writefence.ConsistentBlobLister).ListBlobsConsistent(ctx, "", "", func(writefence.BlobInfo) error { n++; return nil }))
	must(t, s.(writefence.BlobStore).ListBlobs(ctx, "", func(writefence.BlobInfo) error { n += 10; return nil }))
	if n != 10 {
		t.Errorf("listed %d, want the plain listing's one blob only", n)
	}
	if want := []string{"Put k v", "Get refused ", "ListBlobsConsistent  ", "ListBlobs  "}; !slices.Equal(seen, want) {
		t.Errorf("Before saw %q, want %q", seen, want)
	}
	if got := [2]int64{s.Calls(fakestore.Get), s.OK(fakestore.Get)}; got != [2]int64{1, 0} {
		t.Errorf("a read Before refused: calls and OK %v", got)
	}
}

// still is a store that allocates nothing: every key holds the same
// bytes, at the same version.
type still struct{}

var stillData = []byte("still")

func (still) Get(context.Context, string) ([]byte, string, error) { return stillData, "v", nil }

func (still) PutIfVersion(context.Context, string, []byte, string) (string, error) { return "v", nil }

// TestNoAllocations: a Store with no hooks, faults or ByKey allocates
// nothing of its own, so a benchmark counts through it.
func TestNoAllocations(t *testing.T) {
	ctx := t.Context()
	s := fakestore.New(still{}, fakestore.Options{})
	if n := testing.AllocsPerRun(100, func() {
		_, _, _ = s.Get(ctx, "k")
		_, _ = s.PutIfVersion(ctx, "k", stillData, "v")
	}); n != 0 {
		t.Errorf("a read and a write through the Store allocate %v times", n)
	}
}

// TestConcurrentFaults: a fault of n calls applies to exactly n of the
// calls made at once; run it with -race.
func TestConcurrentFaults(t *testing.T) {
	ctx := t.Context()
	const calls, fail = 64, 5
	errDown := errors.New("down")
	s := fakestore.New(&writefence.MemStore{}, fakestore.Options{ByKey: true, Faults: []fakestore.Fault{{Op: fakestore.Put, Times: fail, Err: errDown}}})
	var wg sync.WaitGroup
	var mu sync.Mutex
	failed := 0
	start := make(chan struct{})
	for i := range calls {
		wg.Go(func() {
			<-start
			_, err := s.PutIfVersion(ctx, string(rune('a'+i%8)), bytes.Repeat([]byte{1}, i), "")
			if err == errDown {
				mu.Lock()
				failed++
				mu.Unlock()
			}
		})
	}
	close(start)
	wg.Wait()
	if failed != fail || s.Calls(fakestore.Put) != calls {
		t.Errorf("%d of %d calls failed, want %d", failed, s.Calls(fakestore.Put), fail)
	}
	var keys int64
	for _, k := range s.Keys(fakestore.Put) {
		keys += s.Calls(fakestore.Put, k)
	}
	if keys != calls {
		t.Errorf("the calls by key add up to %d, want %d", keys, calls)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
