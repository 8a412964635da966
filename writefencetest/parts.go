package writefencetest

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/writefence/writefence"
)

// putParts writes parts and fails the test unless the write lands with a
// token.
func putParts(t *testing.T, pp writefence.PartsPutter, key string, parts [][]byte, expect string) string {
	t.Helper()
	v, err := pp.PutPartsIfVersion(t.Context(), key, parts, expect)
	return landed(t, fmt.Sprintf("PutPartsIfVersion(%q, %d parts, %q)", key, len(parts), expect), v, err)
}

// testPartsMatchPut checks that PutPartsIfVersion is PutIfVersion of the
// joined parts: the bytes stored, the version returned, and every
// precondition (create-only, current, stale, missing).
func testPartsMatchPut(t *testing.T, sc *scope) {
	pp := capability[writefence.PartsPutter](t, sc)
	key := sc.key("parts")
	first := [][]byte{[]byte("header|"), nil, patterned(300, 'p'), {}, []byte("|end")}
	v1 := putParts(t, pp, key, first, "")
	wantContent(t, sc.s, key, bytes.Join(first, nil), v1)

	_, err := pp.PutPartsIfVersion(t.Context(), key, [][]byte{[]byte("second create")}, "")
	wantConflict(t, err, fmt.Sprintf("a create-only PutPartsIfVersion(%q) of an existing key", key))
	wantContent(t, sc.s, key, bytes.Join(first, nil), v1)

	second := [][]byte{[]byte("h2|"), patterned(50, 'q')}
	v2 := putParts(t, pp, key, second, v1)
	if v2 == v1 {
		t.Errorf("an update to different bytes returned the old version %q", v1)
	}
	wantContent(t, sc.s, key, bytes.Join(second, nil), v2)

	_, err = pp.PutPartsIfVersion(t.Context(), key, [][]byte{[]byte("stale")}, v1)
	wantConflict(t, err, fmt.Sprintf("PutPartsIfVersion(%q) with the stale version %q", key, v1))
	wantContent(t, sc.s, key, bytes.Join(second, nil), v2)

	// The store's PutIfVersion and PutPartsIfVersion share one version
	// sequence: each conditions on the other's tokens.
	v3 := put(t, sc.s, key, []byte("plain"), v2)
	v4 := putParts(t, pp, key, [][]byte{[]byte("parts "), []byte("again")}, v3)
	wantContent(t, sc.s, key, []byte("parts again"), v4)
	_, err = sc.s.PutIfVersion(t.Context(), key, []byte("stale plain"), v3)
	wantConflict(t, err, fmt.Sprintf("PutIfVersion(%q) with the version %q a PutPartsIfVersion replaced", key, v3))

	missing := sc.key("parts-missing")
	_, err = pp.PutPartsIfVersion(t.Context(), missing, [][]byte{[]byte("made-up")}, v4)
	wantConflict(t, err, fmt.Sprintf("PutPartsIfVersion(%q) of a missing key with %q's version", missing, key))
	wantMissing(t, sc.s, missing)

	empty := sc.key("parts-empty")
	v := putParts(t, pp, empty, nil, "")
	wantContent(t, sc.s, empty, nil, v)
	v = putParts(t, pp, empty, [][]byte{{}, nil}, v)
	wantContent(t, sc.s, empty, nil, v)
}

// testPartsAliasing checks that the store keeps no reference to the parts
// once PutPartsIfVersion has returned.
func testPartsAliasing(t *testing.T, sc *scope) {
	pp := capability[writefence.PartsPutter](t, sc)
	key := sc.key("parts-alias")
	a, b := []byte("first "), []byte("part")
	v := putParts(t, pp, key, [][]byte{a, b}, "")
	copy(a, "XXXXXX")
	copy(b, "YYYY")
	wantContent(t, sc.s, key, []byte("first part"), v)
}
