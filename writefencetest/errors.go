package writefencetest

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/writefence/writefence"
)

// The checks of the typed errors: a store reports the failures a caller
// acts on (a missing key, a refused precondition) as a
// *writefence.StoreError naming the operation and the key, as
// fs.PathError does for a path, that matches the sentinel.

// wantTyped fails the test unless err, an error call returned from a
// store method, is nil or reaches a *writefence.StoreError (errors.As),
// as every failure of a store operation must. Two errors are not failures
// of the store and pass as they are: a done context's own error
// (context.Canceled, context.DeadlineExceeded), and a *writefence.WireError
// (writefence.ErrWire), the brand's refusal of a PutIfBranded, which
// writefence.PutIfBranded returns as it is when it falls back to Get. Every
// helper of the suite that looks at a store's error calls it, so the rule
// is checked on every error the suite sees, not in one subtest alone.
func wantTyped(t *testing.T, err error, call string) {
	t.Helper()
	var se *writefence.StoreError
	switch {
	case err == nil, errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, writefence.ErrWire):
	case !errors.As(err, &se):
		t.Errorf("%s: %v (%T); want an error that reaches a *writefence.StoreError, as every failure of a store operation is", call, err, err)
	}
}

// wantStoreError fails the test unless err is a *writefence.StoreError
// for key, with an operation named, matching want.
func wantStoreError(t *testing.T, err error, call, key, name string, want error) {
	t.Helper()
	var se *writefence.StoreError
	switch {
	case err == nil:
		t.Errorf("%s succeeded; want a *writefence.StoreError matching %s", call, name)
	case !errors.Is(err, want):
		t.Errorf("%s: %v; want an error matching %s", call, err, name)
	case !errors.As(err, &se):
		t.Errorf("%s: %v (%T); want a *writefence.StoreError, as fs.PathError is for a path", call, err, err)
	case se.Key != key:
		t.Errorf("%s: %v: *writefence.StoreError with Key %q; want %q, the key operated on", call, err, se.Key, key)
	case se.Op == "":
		t.Errorf("%s: %v: *writefence.StoreError with an empty Op; want the store and the operation, e.g. %q", call, err, "mem get")
	}
}

// testErrorsNotFound checks the error of Get and GetPrefix of a missing
// key.
func testErrorsNotFound(t *testing.T, sc *scope) {
	key := sc.key("not-found")
	_, _, err := sc.s.Get(t.Context(), key)
	wantStoreError(t, err, fmt.Sprintf("Get(%q) of a missing key", key), key, "writefence.ErrNotFound", writefence.ErrNotFound)
	_, _, _, err = writefence.GetPrefix(t.Context(), sc.s, key, 8)
	wantStoreError(t, err, fmt.Sprintf("GetPrefix(%q, 8) of a missing key", key), key, "writefence.ErrNotFound", writefence.ErrNotFound)
}

// testErrorsConflict checks the error of each refused precondition:
// create-only over an existing key, a stale version, a version for a
// missing key, through every write path and through PutIfBranded under a
// matching brand.
func testErrorsConflict(t *testing.T, sc *scope) {
	key := sc.key("conflict")
	v1 := put(t, sc.s, key, []byte("first"), "")
	v2 := put(t, sc.s, key, []byte("second"), v1)
	missing := sc.key("conflict-missing")
	for _, p := range writePaths {
		for _, w := range []struct{ key, expect, what string }{
			{key, "", "a create-only %s of an existing key"},
			{key, v1, "%s with the stale version"},
			{missing, v1, "%s of a missing key"},
		} {
			_, err := p.write(t.Context(), sc.s, w.key, []byte("never"), w.expect)
			wantStoreError(t, err, fmt.Sprintf(w.what, p.call(w.key, []byte("never"), w.expect)), w.key, "writefence.ErrConflict", writefence.ErrConflict)
		}
	}
	brand := sc.key("conflict-brand")
	put(t, sc.s, brand, []byte(brandedIdentity), "")
	_, err := writefence.PutIfBranded(t.Context(), sc.s, brand, brandedIdentity, key, [][]byte{[]byte("never")}, v1)
	if errors.Is(err, errors.ErrUnsupported) {
		// The store cannot read the two keys in one atomic step (see
		// skipUnsupported): it wrote nothing.
		t.Logf("PutIfBranded(%q, %q, %q, ...) is refused as unsupported: %v", brand, brandedIdentity, key, err)
		wantContent(t, sc.s, key, []byte("second"), v2)
		return
	}
	wantStoreError(t, err, fmt.Sprintf("PutIfBranded(%q, %q, %q, ..., %q) with the stale version", brand, brandedIdentity, key, v1),
		key, "writefence.ErrConflict", writefence.ErrConflict)
}
