package writefencetest

import (
	"errors"
	"fmt"
	"testing"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/overwrite"
)

// refusedAtWrite reports whether err is a store's refusal, at write time,
// of an object over its limit, which the check of the read limit accepts
// in place of a refusal at read time.
func refusedAtWrite(err error) bool {
	return errors.Is(err, writefence.ErrInvalidArgument) || errors.Is(err, writefence.ErrTooLarge)
}

// testGetTooLarge checks the read limit of Options.ReadLimit: an object of
// exactly the limit is read whole, by Get and GetPrefix; one byte more is
// refused by both with ErrTooLarge. A store may refuse either object at
// write time instead, with ErrInvalidArgument or ErrTooLarge, writing
// nothing.
func testGetTooLarge(t *testing.T, sc *scope) {
	limit := sc.opts.ReadLimit
	if limit <= 0 {
		t.Skip("Options.ReadLimit is not set: the suite does not know the store's read limit")
	}
	logPaths(t, sc, "GetPrefix", "PutParts")
	ctx := t.Context()
	write := func(name string, size int64) (string, []byte, string, bool) {
		t.Helper()
		key := sc.key(name)
		data := patterned(int(size), 'L')
		v, err := writefence.PutParts(ctx, sc.s, key, split(data), "")
		switch {
		case refusedAtWrite(err):
			t.Logf("PutParts(%q, %d bytes) was refused at write: %v", key, size, err)
			wantMissing(t, sc.s, key)
			return key, data, "", false
		case err != nil:
			t.Fatalf("PutParts(%q, %d bytes): %v", key, size, err)
		}
		return key, data, landed(t, fmt.Sprintf("PutParts(%q, %d bytes)", key, size), v, err), true
	}

	if key, data, v, ok := write("at-limit", limit); ok {
		wantContent(t, sc.s, key, data, v)
		prefix, size, pv, err := writefence.GetPrefix(ctx, sc.s, key, overwrite.PrefixLen)
		switch {
		case err != nil:
			t.Errorf("GetPrefix(%q, %d) of an object of exactly the read limit, %d bytes: %v", key, overwrite.PrefixLen, limit, err)
		case string(prefix) != string(data[:overwrite.PrefixLen]) || size != limit || pv != v:
			t.Errorf("GetPrefix(%q, %d) returned %s, size %d, version %q; want %s, size %d, version %q",
				key, overwrite.PrefixLen, describe(prefix), size, pv, describe(data[:overwrite.PrefixLen]), limit, v)
		}
	}

	key, _, _, ok := write("over-limit", limit+1)
	if !ok {
		return
	}
	_, _, err := sc.s.Get(ctx, key)
	call := fmt.Sprintf("Get(%q) of %d bytes, over the read limit of %d", key, limit+1, limit)
	wantOnly(t, err, call, "writefence.ErrTooLarge",
		writefence.ErrTooLarge, writefence.ErrNotFound, writefence.ErrConflict, writefence.ErrCorrupt)
	wantTyped(t, err, call)
	for _, n := range []int64{1, limit + 1} {
		_, _, _, err := writefence.GetPrefix(ctx, sc.s, key, n)
		call := fmt.Sprintf("GetPrefix(%q, %d) of %d bytes, over the read limit of %d", key, n, limit+1, limit)
		wantOnly(t, err, call, "writefence.ErrTooLarge",
			writefence.ErrTooLarge, writefence.ErrNotFound, writefence.ErrConflict, writefence.ErrCorrupt)
		wantTyped(t, err, call)
	}
}
