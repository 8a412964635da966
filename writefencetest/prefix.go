package writefencetest

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/defaults"
)

// patterned returns n bytes that differ from position to position and from
// one seed to another, so a prefix of the wrong length or of other bytes
// shows.
func patterned(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return b
}

// The checks of writefence.GetPrefix, the read of a record's head a Fence
// makes: through the store's PrefixReader when it declares one (see
// writefence.Capable), else through Get, which is then what is checked.

// testPrefixMatchesGet checks that GetPrefix returns what Get would: the
// leading bytes, the object's size and its version, with n smaller than the
// object, equal to it and larger, right after each write and before any
// Get, so a version that lags a write shows.
func testPrefixMatchesGet(t *testing.T, sc *scope) {
	logPaths(t, sc, "GetPrefix")
	key := sc.key("prefix")
	v := ""
	for _, data := range [][]byte{patterned(100, 'a'), patterned(60, 'b'), {}, patterned(1, 'c')} {
		v = put(t, sc.s, key, data, v)
		wantPrefixes(t, sc.s, key, data, v)
	}
}

// wantPrefixes fails the test unless GetPrefix of key, for several n,
// returns the leading bytes of data, its size and version, and Get then
// agrees.
func wantPrefixes(t *testing.T, s writefence.ConditionalStore, key string, data []byte, version string) {
	t.Helper()
	size := int64(len(data))
	seen := map[int64]bool{}
	for _, n := range []int64{1, size / 2, size - 1, size, size + 1, 4*size + 8} {
		if n < 1 || seen[n] {
			continue
		}
		seen[n] = true
		call := fmt.Sprintf("GetPrefix(%q, %d) of a %d-byte object", key, n, size)
		prefix, gotSize, v, err := writefence.GetPrefix(t.Context(), s, key, n)
		if err != nil {
			t.Fatalf("%s: %v", call, err)
		}
		if want := data[:min(n, size)]; !bytes.Equal(prefix, want) {
			t.Errorf("%s returned %s; want the leading %s", call, describe(prefix), describe(want))
		}
		if gotSize != size {
			t.Errorf("%s returned size %d; want %d, the size Get returns", call, gotSize, size)
		}
		if v != version {
			t.Errorf("%s returned version %q; want %q, the version the write returned and Get returns", call, v, version)
		}
	}
	wantContent(t, s, key, data, version)
}

// testPrefixMissing checks that GetPrefix reports a key never written, and
// a deleted one, as Get does.
func testPrefixMissing(t *testing.T, sc *scope) {
	logPaths(t, sc, "GetPrefix")
	wantPrefixMissing := func(key string) {
		t.Helper()
		prefix, size, v, err := writefence.GetPrefix(t.Context(), sc.s, key, 8)
		switch {
		case err == nil:
			t.Errorf("GetPrefix(%q) returned %s, size %d, version %q; want an error matching writefence.ErrNotFound", key, describe(prefix), size, v)
		case !errors.Is(err, writefence.ErrNotFound) || errors.Is(err, writefence.ErrConflict):
			t.Errorf("GetPrefix(%q): %v; want an error matching writefence.ErrNotFound only", key, err)
		default:
			wantTyped(t, err, fmt.Sprintf("GetPrefix(%q, 8)", key))
		}
	}
	wantPrefixMissing(sc.key("never"))

	d, ok := sc.s.(writefence.Deleter)
	if !ok {
		return
	}
	key := sc.key("deleted")
	put(t, sc.s, key, []byte("deleted soon"), "")
	if err := d.Delete(t.Context(), key); err != nil {
		t.Fatalf("Delete(%q): %v", key, err)
	}
	wantPrefixMissing(key)
}

// testPrefixSizes checks GetPrefix against Get around the sizes a Fence
// reads: for n of 1 and of a record's largest header, objects of no bytes,
// one byte, and n-1, n, n+1 and 3n+7 bytes (up to the store's size limit).
func testPrefixSizes(t *testing.T, sc *scope) {
	logPaths(t, sc, "GetPrefix")
	limit := sc.sizeLimit(t)
	for _, n := range []int64{1, defaults.MaxHeaderSize} {
		seen := map[int64]bool{}
		for _, size := range []int64{0, 1, n - 1, n, n + 1, 3*n + 7} {
			if seen[size] || limit > 0 && size > limit {
				continue
			}
			seen[size] = true
			key := sc.key(fmt.Sprintf("prefix-sizes/%d/%d", n, size))
			data := patterned(int(size), byte(size))
			v := put(t, sc.s, key, data, "")
			call := fmt.Sprintf("GetPrefix(%q, %d) of a %d-byte object", key, n, size)
			prefix, gotSize, pv, err := writefence.GetPrefix(t.Context(), sc.s, key, n)
			switch {
			case err != nil:
				t.Errorf("%s: %v", call, err)
			case !bytes.Equal(prefix, data[:min(n, size)]) || gotSize != size || pv != v:
				t.Errorf("%s returned %s, size %d, version %q; want %s, size %d, version %q, as Get",
					call, describe(prefix), gotSize, pv, describe(data[:min(n, size)]), size, v)
			}
			wantContent(t, sc.s, key, data, v)
		}
	}
}

// testPrefixToken checks that the version GetPrefix returns conditions a
// write as Get's does: a write on it lands, and a second one on it is
// refused.
func testPrefixToken(t *testing.T, sc *scope) {
	logPaths(t, sc, "GetPrefix", "PutParts")
	key := sc.key("prefix-token")
	v := put(t, sc.s, key, []byte("first contents"), "")
	v = put(t, sc.s, key, []byte{}, v)
	prefix, size, pv, err := writefence.GetPrefix(t.Context(), sc.s, key, 4)
	switch {
	case err != nil:
		t.Fatalf("GetPrefix(%q, 4) of an empty object: %v", key, err)
	case len(prefix) != 0 || size != 0 || pv != v:
		t.Errorf("GetPrefix(%q, 4) of an empty object returned %s, size %d, version %q; want no bytes, size 0, version %q", key, describe(prefix), size, pv, v)
	}
	next := put(t, sc.s, key, []byte("third"), pv)
	_, err = writefence.PutParts(t.Context(), sc.s, key, split([]byte("fourth")), pv)
	wantConflict(t, err, fmt.Sprintf("PutParts(%q) with the version %q GetPrefix returned, after a write on it", key, pv))
	wantContent(t, sc.s, key, []byte("third"), next)
}
