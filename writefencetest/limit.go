package writefencetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/defaults"
	"github.com/writefence/writefence/internal/overwrite"
)

// The store's size limit. A store may refuse an object at write time
// (ErrTooLarge or ErrInvalidArgument, writing nothing: a DynamoDB item
// holds 400 KB, an etcd request 1.5 MiB) or at read time (ErrTooLarge, a
// read limit). Options.ReadLimit states the limit; without it the kit
// writes largePayload bytes and, if the store refuses them with
// ErrTooLarge, looks for the largest object the store both writes and
// reads, and checks the store there as it would at a stated limit.

// minLimit is the least size limit the kit accepts: a record's header,
// which any store a Fence writes must hold beside its payload.
const minLimit = defaults.MaxHeaderSize

// limits is what one run of the kit knows of the store's size limit,
// shared by its subtests: whichever needs it first learns it.
type limits struct {
	mu      sync.Mutex // guards the fields below
	learned bool       // limit is known, or learning failed (then failed is set)
	failed  string     // the subtest whose learning failed
	limit   int64      // the largest object the store writes and reads; 0: at least largePayload
}

// refusedAtWrite reports whether err is a store's refusal, at write time,
// of an object over its limit, which the check of the limit accepts in
// place of a refusal at read time.
func refusedAtWrite(err error) bool {
	return errors.Is(err, writefence.ErrInvalidArgument) || errors.Is(err, writefence.ErrTooLarge)
}

// limitKey returns the key of an object of n bytes the limit checks write:
// its name has one length whatever n, so a store whose write limit counts
// the key too (an etcd request) draws one line for every one of them.
func (sc *scope) limitKey(what string, n int64) string {
	return sc.key(fmt.Sprintf("limit-%s-%09d", what, n))
}

// sizeLimit returns the store's size limit: Options.ReadLimit when set,
// else the limit learned from the store's ErrTooLarge, 0 when the store
// writes and reads largePayload bytes and so has no limit the kit looks
// for. It fails the test when the limit cannot be learned.
func (sc *scope) sizeLimit(t *testing.T) int64 {
	t.Helper()
	if sc.opts.ReadLimit > 0 {
		return sc.opts.ReadLimit
	}
	l := sc.limits
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.learned && l.failed != "":
		t.Fatalf("the store's size limit could not be learned: see %s", l.failed)
	case l.learned:
		return l.limit
	}
	l.learned, l.failed = true, t.Name() // until learn returns
	l.limit = sc.learn(t)
	l.failed = ""
	return l.limit
}

// fits writes n bytes at a fresh key and reads them back: it reports
// whether they round-trip, and fails the test unless a refusal is one of
// size, typed, and leaves nothing written.
func (sc *scope) fits(t *testing.T, n int64) bool {
	t.Helper()
	key := sc.limitKey("probe", n)
	data := patterned(int(n), 'P')
	v, err := writefence.PutParts(t.Context(), sc.s, key, split(data), "")
	call := fmt.Sprintf("PutParts(%q, %d bytes)", key, n)
	switch {
	case errors.Is(err, writefence.ErrTooLarge):
		wantTyped(t, err, call)
		wantMissing(t, sc.s, key)
		t.Logf("%s was refused at write: %v", call, err)
		return false
	case err != nil:
		t.Fatalf("%s: %v", call, err)
	}
	v = landed(t, call, v, err)
	got, gv, err := sc.s.Get(t.Context(), key)
	switch {
	case errors.Is(err, writefence.ErrTooLarge):
		wantTyped(t, err, fmt.Sprintf("Get(%q) of %d bytes", key, n))
		t.Logf("Get(%q) of %d bytes was refused: %v", key, n, err)
		return false
	case err != nil:
		t.Fatalf("Get(%q) of %d bytes: %v", key, n, err)
	case string(got) != string(data) || gv != v:
		t.Fatalf("Get(%q) of %d bytes returned %s, version %q; want the bytes written, version %q", key, n, describe(got), gv, v)
	}
	return true
}

// learn returns the largest object the store writes and reads, 0 when that
// is largePayload or more: a binary search between minLimit, which the
// store must hold, and the first size it refuses with ErrTooLarge.
func (sc *scope) learn(t *testing.T) int64 {
	t.Helper()
	if sc.fits(t, largePayload) {
		return 0
	}
	if !sc.fits(t, minLimit) {
		t.Fatalf("the store refuses an object of %d bytes as too large: a record's header alone may take that much", int64(minLimit))
	}
	lo, hi := int64(minLimit), int64(largePayload) // lo fits, hi does not
	probes := 2
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if sc.fits(t, mid) {
			lo = mid
		} else {
			hi = mid
		}
		probes++
	}
	t.Logf("the store refuses %d bytes with writefence.ErrTooLarge: the largest object it writes and reads is %d bytes (%d probes); Options.ReadLimit was not set, so the kit checks the store's limit there", int64(largePayload), lo, probes)
	return lo
}

// testGetTooLarge checks the store's size limit (Options.ReadLimit, or the
// one the kit learned): an object of exactly the limit is read whole, by
// Get and GetPrefix; one byte more is refused by both with ErrTooLarge. A
// store may refuse either object at write time instead, with
// ErrInvalidArgument or ErrTooLarge, writing nothing.
func testGetTooLarge(t *testing.T, sc *scope) {
	limit := sc.sizeLimit(t)
	if limit <= 0 {
		t.Skipf("Options.ReadLimit is not set and the store writes and reads %d bytes: the kit does not look for a limit above that", int64(largePayload))
	}
	logPaths(t, sc, "GetPrefix", "PutParts")
	ctx := t.Context()
	write := func(size int64) (string, []byte, string, bool) {
		t.Helper()
		key := sc.limitKey("check", size)
		data := patterned(int(size), 'L')
		v, err := writefence.PutParts(ctx, sc.s, key, split(data), "")
		call := fmt.Sprintf("PutParts(%q, %d bytes)", key, size)
		switch {
		case refusedAtWrite(err):
			t.Logf("%s was refused at write: %v", call, err)
			wantTyped(t, err, call)
			wantMissing(t, sc.s, key)
			return key, data, "", false
		case err != nil:
			t.Fatalf("%s: %v", call, err)
		}
		return key, data, landed(t, call, v, err), true
	}

	key, data, v, ok := write(limit)
	if !ok {
		t.Errorf("an object of exactly the size limit, %d bytes, was refused; the store must write and read it", limit)
	} else {
		wantContent(t, sc.s, key, data, v)
		prefix, size, pv, err := writefence.GetPrefix(ctx, sc.s, key, overwrite.PrefixLen)
		switch {
		case err != nil:
			t.Errorf("GetPrefix(%q, %d) of an object of exactly the size limit, %d bytes: %v", key, overwrite.PrefixLen, limit, err)
		case string(prefix) != string(data[:overwrite.PrefixLen]) || size != limit || pv != v:
			t.Errorf("GetPrefix(%q, %d) returned %s, size %d, version %q; want %s, size %d, version %q",
				key, overwrite.PrefixLen, describe(prefix), size, pv, describe(data[:overwrite.PrefixLen]), limit, v)
		}
	}

	key, _, _, ok = write(limit + 1)
	if !ok {
		return
	}
	_, _, err := sc.s.Get(ctx, key)
	call := fmt.Sprintf("Get(%q) of %d bytes, over the size limit of %d", key, limit+1, limit)
	wantOnly(t, err, call, "writefence.ErrTooLarge",
		writefence.ErrTooLarge, writefence.ErrNotFound, writefence.ErrConflict, writefence.ErrCorrupt)
	wantStoreError(t, err, call, key, "writefence.ErrTooLarge", writefence.ErrTooLarge)
	for _, n := range []int64{1, limit + 1} {
		_, _, _, err := writefence.GetPrefix(ctx, sc.s, key, n)
		call := fmt.Sprintf("GetPrefix(%q, %d) of %d bytes, over the size limit of %d", key, n, limit+1, limit)
		wantOnly(t, err, call, "writefence.ErrTooLarge",
			writefence.ErrTooLarge, writefence.ErrNotFound, writefence.ErrConflict, writefence.ErrCorrupt)
		wantStoreError(t, err, call, key, "writefence.ErrTooLarge", writefence.ErrTooLarge)
	}
}
