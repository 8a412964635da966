package writefencetest

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/writefence/writefence"
)

// The checks of writefence.PutParts, the write a Fence makes: through the
// store's PartsPutter when it declares one (see writefence.Capable), else
// through PutIfVersion of the joined parts, which is then what is checked.

// putParts writes parts through writefence.PutParts and fails the test
// unless the write lands with a token.
func putParts(t *testing.T, s writefence.ConditionalStore, key string, parts [][]byte, expect string) string {
	t.Helper()
	v, err := writefence.PutParts(t.Context(), s, key, parts, expect)
	return landed(t, fmt.Sprintf("PutParts(%q, %d parts, %q)", key, len(parts), expect), v, err)
}

// testPartsMatchPut checks that PutParts is PutIfVersion of the joined
// parts: the bytes stored, the version returned, every precondition
// (create-only, current, stale, missing), and one version sequence shared
// with PutIfVersion.
func testPartsMatchPut(t *testing.T, sc *scope) {
	logPaths(t, sc, "PutParts")
	ctx := t.Context()
	key := sc.key("parts")
	first := [][]byte{[]byte("header|"), nil, patterned(300, 'p'), {}, []byte("|end")}
	v1 := putParts(t, sc.s, key, first, "")
	wantContent(t, sc.s, key, bytes.Join(first, nil), v1)

	_, err := writefence.PutParts(ctx, sc.s, key, [][]byte{[]byte("second create")}, "")
	wantConflict(t, err, fmt.Sprintf("a create-only PutParts(%q) of an existing key", key))
	wantContent(t, sc.s, key, bytes.Join(first, nil), v1)

	second := [][]byte{[]byte("h2|"), patterned(50, 'q')}
	v2 := putParts(t, sc.s, key, second, v1)
	if v2 == v1 {
		t.Errorf("an update to different bytes returned the old version %q", v1)
	}
	wantContent(t, sc.s, key, bytes.Join(second, nil), v2)

	_, err = writefence.PutParts(ctx, sc.s, key, [][]byte{[]byte("stale")}, v1)
	wantConflict(t, err, fmt.Sprintf("PutParts(%q) with the stale version %q", key, v1))
	wantContent(t, sc.s, key, bytes.Join(second, nil), v2)

	// PutIfVersion and PutParts share one version sequence: each
	// conditions on the other's tokens.
	v3, err := sc.s.PutIfVersion(ctx, key, []byte("plain"), v2)
	v3 = landed(t, fmt.Sprintf("PutIfVersion(%q) with the version %q PutParts returned", key, v2), v3, err)
	v4 := putParts(t, sc.s, key, [][]byte{[]byte("parts "), []byte("again")}, v3)
	wantContent(t, sc.s, key, []byte("parts again"), v4)
	_, err = sc.s.PutIfVersion(ctx, key, []byte("stale plain"), v3)
	wantConflict(t, err, fmt.Sprintf("PutIfVersion(%q) with the version %q a PutParts replaced", key, v3))
	wantContent(t, sc.s, key, []byte("parts again"), v4)

	missing := sc.key("parts-missing")
	_, err = writefence.PutParts(ctx, sc.s, missing, [][]byte{[]byte("made-up")}, v4)
	wantConflict(t, err, fmt.Sprintf("PutParts(%q) of a missing key with %q's version", missing, key))
	wantMissing(t, sc.s, missing)

	empty := sc.key("parts-empty")
	v := putParts(t, sc.s, empty, nil, "")
	wantContent(t, sc.s, empty, nil, v)
	v = putParts(t, sc.s, empty, [][]byte{{}, nil}, v)
	wantContent(t, sc.s, empty, nil, v)
}

// testPartsAliasing checks that the store keeps no reference to the parts
// once PutParts has returned.
func testPartsAliasing(t *testing.T, sc *scope) {
	logPaths(t, sc, "PutParts")
	key := sc.key("parts-alias")
	a, b := []byte("first "), []byte("part")
	v := putParts(t, sc.s, key, [][]byte{a, b}, "")
	copy(a, "XXXXXX")
	copy(b, "YYYY")
	wantContent(t, sc.s, key, []byte("first part"), v)
}
