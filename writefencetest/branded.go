package writefencetest

import (
	"errors"
	"fmt"
	"testing"

	"github.com/writefence/writefence"
)

// The checks of writefence.PutIfBranded, the write of a Fence whose Brand
// is BrandVerifyAlways: through the store's BrandedPutter when it declares
// one (see writefence.Capable), else through a Get of the brand key and
// writefence.PutParts, which is then what is checked. PutIfBranded
// refuses, with a *writefence.WireError and writing nothing, while the
// brand key is absent or holds another identity, and otherwise is
// PutParts, sharing its version tokens. The brand is read at every write:
// a brand changed between two writes refuses the second, and a brand
// changed back admits the next.

// brandedChecks are the clauses of writefence.BrandedPutter.
var brandedChecks = []check{
	{"Absent", testBrandedAbsent},
	{"Other", testBrandedOther},
	{"Matching", testBrandedMatching},
	{"Changed", testBrandedChanged},
}

// The identities the checks brand their keys with.
const (
	brandedIdentity = "writefencetest/v1"
	otherIdentity   = "writefencetest/other"
)

// skipUnsupported skips the test when the store refuses PutIfBranded of
// key under brandKey with an error matching errors.ErrUnsupported: it
// cannot read the two keys in one atomic step (see
// writefence.BrandedPutter), so it writes under no brand there.
// Options.KeyPrefix can put the suite's keys where it can. key does not
// exist yet, and the write asks for a version no store issued, so no
// store writes it, whether it checks the brand or not.
func skipUnsupported(t *testing.T, sc *scope, brandKey, key string) {
	t.Helper()
	_, err := writefence.PutIfBranded(t.Context(), sc.s, brandKey, brandedIdentity, key, split([]byte("never")), "writefencetest-made-up")
	if errors.Is(err, errors.ErrUnsupported) {
		t.Skipf("PutIfBranded(%q, %q, %q, ...) is refused as unsupported, writing nothing: %v", brandKey, brandedIdentity, key, err)
	}
}

// putBranded writes under brandKey, with the data in two parts, and fails
// the test unless the write lands with a token.
func putBranded(t *testing.T, s writefence.ConditionalStore, brandKey, key string, data []byte, expect string) string {
	t.Helper()
	v, err := writefence.PutIfBranded(t.Context(), s, brandKey, brandedIdentity, key, split(data), expect)
	return landed(t, fmt.Sprintf("PutIfBranded(%q, %q, %q, %d bytes, %q)", brandKey, brandedIdentity, key, len(data), expect), v, err)
}

// wantRefused fails the test unless PutIfBranded of key under brandKey,
// expecting expect, is refused with a *writefence.WireError that matches
// neither ErrConflict nor ErrNotFound: with Absent set when found is "",
// else naming found.
func wantRefused(t *testing.T, s writefence.ConditionalStore, brandKey, key, expect, found string) {
	t.Helper()
	call := fmt.Sprintf("PutIfBranded(%q, %q, %q, ..., %q)", brandKey, brandedIdentity, key, expect)
	_, err := writefence.PutIfBranded(t.Context(), s, brandKey, brandedIdentity, key, split([]byte("never")), expect)
	wantWire(t, err, call, brandKey, found)
}

// wantWire fails the test unless err, call's, is the refusal of a brand
// key holding found (none when found is ""): a *writefence.WireError that
// matches neither ErrConflict nor ErrNotFound.
func wantWire(t *testing.T, err error, call, brandKey, found string) {
	t.Helper()
	wantOnly(t, err, call, "writefence.ErrWire", writefence.ErrWire, writefence.ErrConflict, writefence.ErrNotFound)
	var we *writefence.WireError
	switch {
	case err == nil:
		return // wantOnly said so
	case !errors.As(err, &we):
		t.Errorf("%s: %v; want a *writefence.WireError", call, err)
		return
	}
	want := writefence.WireError{Key: brandKey, Expected: brandedIdentity, Found: found, Absent: found == ""}
	if *we != want {
		t.Errorf("%s: refused with %#v; want %#v", call, *we, want)
	}
}

// testBrandedAbsent checks that a brand key never written refuses a create
// and an update, and that neither writes.
func testBrandedAbsent(t *testing.T, sc *scope) { testBrandedRefused(t, sc, "") }

// testBrandedOther checks that a brand key holding another identity
// refuses a create and an update, names what it holds, and that neither
// writes.
func testBrandedOther(t *testing.T, sc *scope) { testBrandedRefused(t, sc, otherIdentity) }

// testBrandedRefused checks the refusals of PutIfBranded under a brand key
// that holds found, or none when found is "".
func testBrandedRefused(t *testing.T, sc *scope, found string) {
	logPaths(t, sc, "PutIfBranded")
	brand := sc.key("brand")
	key := sc.key("branded")
	skipUnsupported(t, sc, brand, key)
	bv := ""
	if found != "" {
		bv = put(t, sc.s, brand, []byte(found), "")
	}
	wantRefused(t, sc.s, brand, key, "", found)
	wantMissing(t, sc.s, key)

	v := put(t, sc.s, key, []byte("stored"), "")
	wantRefused(t, sc.s, brand, key, v, found)
	wantContent(t, sc.s, key, []byte("stored"), v)
	if found == "" {
		wantMissing(t, sc.s, brand)
	} else {
		wantContent(t, sc.s, brand, []byte(found), bv)
	}
}

// testBrandedMatching checks that under the right brand PutIfBranded is
// PutParts: the bytes stored, the version returned, every precondition
// (create-only, current, stale, missing), and one version sequence shared
// with PutIfVersion.
func testBrandedMatching(t *testing.T, sc *scope) {
	logPaths(t, sc, "PutIfBranded")
	brand := sc.key("brand")
	key := sc.key("branded")
	skipUnsupported(t, sc, brand, key)
	put(t, sc.s, brand, []byte(brandedIdentity), "")
	ctx := t.Context()
	call := func(expect string) string {
		return fmt.Sprintf("PutIfBranded(%q, %q, %q, ..., %q)", brand, brandedIdentity, key, expect)
	}

	v1 := putBranded(t, sc.s, brand, key, []byte("first"), "")
	wantContent(t, sc.s, key, []byte("first"), v1)
	_, err := writefence.PutIfBranded(ctx, sc.s, brand, brandedIdentity, key, [][]byte{[]byte("second create")}, "")
	wantConflict(t, err, "a create-only "+call(""))
	wantContent(t, sc.s, key, []byte("first"), v1)

	v2 := putBranded(t, sc.s, brand, key, []byte("second"), v1)
	if v2 == v1 {
		t.Errorf("an update to different bytes returned the old version %q", v1)
	}
	wantContent(t, sc.s, key, []byte("second"), v2)
	_, err = writefence.PutIfBranded(ctx, sc.s, brand, brandedIdentity, key, [][]byte{[]byte("stale")}, v1)
	wantConflict(t, err, call(v1)+" with the stale version")
	wantContent(t, sc.s, key, []byte("second"), v2)

	// PutIfVersion and PutIfBranded share one version sequence: each
	// conditions on the other's tokens.
	v3, err := sc.s.PutIfVersion(ctx, key, []byte("plain"), v2)
	v3 = landed(t, fmt.Sprintf("PutIfVersion(%q) with the version %q PutIfBranded returned", key, v2), v3, err)
	v4 := putBranded(t, sc.s, brand, key, []byte("branded again"), v3)
	wantContent(t, sc.s, key, []byte("branded again"), v4)
	_, err = sc.s.PutIfVersion(ctx, key, []byte("stale plain"), v3)
	wantConflict(t, err, fmt.Sprintf("PutIfVersion(%q) with the version %q a PutIfBranded replaced", key, v3))

	missing := sc.key("branded-missing")
	_, err = writefence.PutIfBranded(ctx, sc.s, brand, brandedIdentity, missing, [][]byte{[]byte("made-up")}, v4)
	wantConflict(t, err, fmt.Sprintf("PutIfBranded of the missing key %q with %q's version", missing, key))
	wantMissing(t, sc.s, missing)
}

// testBrandedChanged checks that the brand is read at every write, never
// remembered: a write lands under the brand, the brand key is changed to
// another identity and the next write is refused, changed back and the
// next lands; with a Deleter, a brand key deleted refuses as absent.
func testBrandedChanged(t *testing.T, sc *scope) {
	logPaths(t, sc, "PutIfBranded")
	brand := sc.key("brand-changed")
	key := sc.key("branded-changed")
	skipUnsupported(t, sc, brand, key)
	bv := put(t, sc.s, brand, []byte(brandedIdentity), "")
	v := putBranded(t, sc.s, brand, key, []byte("under the brand"), "")

	bv = put(t, sc.s, brand, []byte(otherIdentity), bv)
	wantRefused(t, sc.s, brand, key, v, otherIdentity)
	wantContent(t, sc.s, key, []byte("under the brand"), v)

	put(t, sc.s, brand, []byte(brandedIdentity), bv)
	v = putBranded(t, sc.s, brand, key, []byte("under the brand again"), v)
	wantContent(t, sc.s, key, []byte("under the brand again"), v)

	d, ok := sc.s.(writefence.Deleter)
	if !ok {
		return
	}
	if err := d.Delete(t.Context(), brand); err != nil {
		t.Fatalf("Delete(%q): %v", brand, err)
	}
	wantRefused(t, sc.s, brand, key, v, "")
	wantContent(t, sc.s, key, []byte("under the brand again"), v)
}
