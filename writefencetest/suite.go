package writefencetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/writefence/writefence"
)

// TestConditionalStore runs the conformance suite against the stores
// newStore returns. newStore is called once per subtest, with that
// subtest's t; it may return the same store every time, because each
// subtest works under a random key prefix of its own. See the package
// documentation for what is checked.
func TestConditionalStore(t *testing.T, newStore func(t *testing.T) writefence.ConditionalStore) {
	groups := []struct {
		name   string
		checks []check
	}{
		{"Get", []check{
			{"Missing", testGetMissing},
			{"UnderOverwrite", testGetUnderOverwrite},
		}},
		{"Create", []check{
			{"NewKey", testCreateNewKey},
			{"Existing", testCreateExisting},
		}},
		{"Update", []check{
			{"Current", testUpdateCurrent},
			{"Stale", testUpdateStale},
			{"Missing", testUpdateMissing},
			{"Deleted", testUpdateDeleted},
		}},
		{"Tokens", []check{
			{"NameContents", testTokensNameContents},
			{"AfterDelete", testTokensAfterDelete},
		}},
		{"GetPrefix", []check{
			{"MatchesGet", testPrefixMatchesGet},
			{"Missing", testPrefixMissing},
		}},
		{"PutParts", []check{
			{"MatchesPut", testPartsMatchPut},
			{"Aliasing", testPartsAliasing},
		}},
		{"Branded", brandedChecks},
		{"Payload", []check{
			{"Empty", testPayloadEmpty},
			{"AllBytes", testPayloadAllBytes},
			{"1MiB", testPayloadLarge},
		}},
		{"Aliasing", []check{
			{"Put", testAliasingPut},
			{"Get", testAliasingGet},
		}},
		{"Canceled", []check{
			{"Get", testCanceledGet},
			{"Put", testCanceledPut},
		}},
		{"Race", []check{
			{"Update", testRaceUpdate},
			{"Create", testRaceCreate},
			{"FencePush", testRaceFencePush},
		}},
	}
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			for _, c := range g.checks {
				t.Run(c.name, func(t *testing.T) {
					c.run(t, newScope(t, newStore))
				})
			}
		})
	}
}

// check is one clause of the contract.
type check struct {
	name string
	run  func(t *testing.T, sc *scope)
}

// scope is one subtest's store and key space.
type scope struct {
	s      writefence.ConditionalStore
	prefix string

	mu   sync.Mutex // guards keys
	keys []string   // every key handed out, deleted at cleanup
}

// cleanupTimeout bounds the deletes a subtest makes when it ends; its own
// context is already cancelled by then.
const cleanupTimeout = 30 * time.Second

func newScope(t *testing.T, newStore func(t *testing.T) writefence.ConditionalStore) *scope {
	t.Helper()
	s := newStore(t)
	if s == nil {
		t.Fatal("newStore returned a nil store")
	}
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	sc := &scope{s: s, prefix: "writefencetest/" + hex.EncodeToString(b) + "/"}
	if d, ok := s.(writefence.Deleter); ok {
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
			defer cancel()
			sc.mu.Lock()
			defer sc.mu.Unlock()
			for _, k := range sc.keys {
				if err := d.Delete(ctx, k); err != nil {
					t.Errorf("cleanup: Delete(%q): %v", k, err)
				}
			}
		})
	}
	return sc
}

// key returns a key under the subtest's prefix and remembers it for cleanup.
func (sc *scope) key(name string) string {
	return sc.track(sc.prefix + name)
}

func (sc *scope) track(key string) string {
	sc.mu.Lock()
	sc.keys = append(sc.keys, key)
	sc.mu.Unlock()
	return key
}

// capability returns the store's implementation of the optional interface
// C, or skips the test when the store has none.
func capability[C any](t *testing.T, sc *scope) C {
	t.Helper()
	c, ok := sc.s.(C)
	if !ok {
		t.Skipf("the store does not implement %v", reflect.TypeFor[C]())
	}
	return c
}

// put writes and fails the test unless the write lands with a token.
func put(t *testing.T, s writefence.ConditionalStore, key string, data []byte, expect string) string {
	t.Helper()
	v, err := s.PutIfVersion(t.Context(), key, data, expect)
	return landed(t, fmt.Sprintf("PutIfVersion(%q, %d bytes, %q)", key, len(data), expect), v, err)
}

// landed returns v, the token call returned, and fails the test unless the
// write landed with one.
func landed(t *testing.T, call, v string, err error) string {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", call, err)
	}
	if v == "" {
		t.Fatalf("%s landed but returned an empty version token", call)
	}
	return v
}

// wantContent fails the test unless Get returns exactly data and version.
func wantContent(t *testing.T, s writefence.ConditionalStore, key string, data []byte, version string) {
	t.Helper()
	got, v, err := s.Get(t.Context(), key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	if !bytes.Equal(got, data) {
		t.Errorf("Get(%q) returned %s; want %s", key, describe(got), describe(data))
	}
	if v != version {
		t.Errorf("Get(%q) returned version %q; want %q, the version the write of these bytes returned", key, v, version)
	}
}

// wantMissing fails the test unless Get reports key as not found.
func wantMissing(t *testing.T, s writefence.ConditionalStore, key string) {
	t.Helper()
	got, v, err := s.Get(t.Context(), key)
	switch {
	case err == nil:
		t.Errorf("Get(%q) returned %s with version %q; want an error matching writefence.ErrNotFound", key, describe(got), v)
	case !errors.Is(err, writefence.ErrNotFound):
		t.Errorf("Get(%q): %v; want an error matching writefence.ErrNotFound", key, err)
	}
}

// wantConflict fails the test unless err is a refused precondition.
func wantConflict(t *testing.T, err error, call string) {
	t.Helper()
	wantOnly(t, err, call, "writefence.ErrConflict", writefence.ErrConflict, writefence.ErrNotFound)
}

// wantOnly fails the test unless err matches want, which the message calls
// name, and none of the sentinels in not.
func wantOnly(t *testing.T, err error, call, name string, want error, not ...error) {
	t.Helper()
	if err == nil {
		t.Errorf("%s succeeded; want an error matching %s", call, name)
		return
	}
	if !errors.Is(err, want) {
		t.Errorf("%s: %v; want an error matching %s", call, err, name)
		return
	}
	for _, n := range not {
		if errors.Is(err, n) {
			t.Errorf("%s: %v matches %s and %q too", call, err, name, n)
		}
	}
}

// describe summarises a payload for a failure message without dumping it.
func describe(b []byte) string {
	if len(b) <= 32 {
		return fmt.Sprintf("%d bytes %q", len(b), b)
	}
	return fmt.Sprintf("%d bytes %q...", len(b), b[:32])
}

func testGetMissing(t *testing.T, sc *scope) {
	key := sc.key("missing")
	_, _, err := sc.s.Get(t.Context(), key)
	if errors.Is(err, writefence.ErrConflict) {
		t.Errorf("Get(%q): %v matches writefence.ErrConflict; a missing key is not a conflict", key, err)
	}
	wantMissing(t, sc.s, key)
}

func testCreateNewKey(t *testing.T, sc *scope) {
	key := sc.key("new")
	v := put(t, sc.s, key, []byte("first"), "")
	wantContent(t, sc.s, key, []byte("first"), v)
}

func testCreateExisting(t *testing.T, sc *scope) {
	key := sc.key("existing")
	v := put(t, sc.s, key, []byte("first"), "")
	_, err := sc.s.PutIfVersion(t.Context(), key, []byte("second"), "")
	wantConflict(t, err, fmt.Sprintf("a second create-only PutIfVersion(%q)", key))
	wantContent(t, sc.s, key, []byte("first"), v)
}

func testUpdateCurrent(t *testing.T, sc *scope) {
	key := sc.key("current")
	v1 := put(t, sc.s, key, []byte("first"), "")
	v2 := put(t, sc.s, key, []byte("second"), v1)
	if v2 == v1 {
		t.Errorf("an update to different bytes returned the old version %q; a token must not name two contents", v1)
	}
	wantContent(t, sc.s, key, []byte("second"), v2)
}

func testUpdateStale(t *testing.T, sc *scope) {
	key := sc.key("stale")
	v1 := put(t, sc.s, key, []byte("first"), "")
	v2 := put(t, sc.s, key, []byte("second"), v1)
	_, err := sc.s.PutIfVersion(t.Context(), key, []byte("third"), v1)
	wantConflict(t, err, fmt.Sprintf("PutIfVersion(%q) with the stale version %q", key, v1))
	wantContent(t, sc.s, key, []byte("second"), v2)
}

// madeUpVersion is decimal so it is a well-formed token for stores whose
// tokens are numbers (GCS generations) as well as an If-Match value for
// ETag stores; no store should ever have issued it for a fresh key.
const madeUpVersion = "7340032000000000001"

func testUpdateMissing(t *testing.T, sc *scope) {
	key := sc.key("missing")
	_, err := sc.s.PutIfVersion(t.Context(), key, []byte("made-up"), madeUpVersion)
	wantConflict(t, err, fmt.Sprintf("PutIfVersion(%q) of a missing key with the made-up version %q", key, madeUpVersion))
	wantMissing(t, sc.s, key)

	// A token the store really issued, but for another key.
	other := sc.key("other")
	v := put(t, sc.s, other, []byte("other"), "")
	_, err = sc.s.PutIfVersion(t.Context(), key, []byte("borrowed"), v)
	wantConflict(t, err, fmt.Sprintf("PutIfVersion(%q) of a missing key with %q's version %q", key, other, v))
	wantMissing(t, sc.s, key)
}

func testUpdateDeleted(t *testing.T, sc *scope) {
	d := capability[writefence.Deleter](t, sc)
	key := sc.key("deleted")
	v := put(t, sc.s, key, []byte("first"), "")
	if err := d.Delete(t.Context(), key); err != nil {
		t.Fatalf("Delete(%q): %v", key, err)
	}
	wantMissing(t, sc.s, key)
	_, err := sc.s.PutIfVersion(t.Context(), key, []byte("second"), v)
	wantConflict(t, err, fmt.Sprintf("PutIfVersion(%q) of a deleted key with its last version %q", key, v))
	wantMissing(t, sc.s, key)
}

func testTokensNameContents(t *testing.T, sc *scope) {
	key := sc.key("tokens")
	a, b := []byte("content A"), []byte("content B")
	vA := put(t, sc.s, key, a, "")
	wantContent(t, sc.s, key, a, vA)
	vB := put(t, sc.s, key, b, vA)
	for range 3 {
		got, v, err := sc.s.Get(t.Context(), key)
		if err != nil {
			t.Fatalf("Get(%q): %v", key, err)
		}
		if v == vA && !bytes.Equal(got, a) {
			t.Fatalf("Get(%q) returned %s with version %q, the version of %q: a token names two contents", key, describe(got), v, a)
		}
		if !bytes.Equal(got, b) || v != vB {
			t.Fatalf("Get(%q) returned %s version %q; want %q version %q", key, describe(got), v, b, vB)
		}
	}
}

// testTokensAfterDelete creates, updates and deletes one key, three times
// over: no token returned, by a write or a read, may name two different
// contents, across the deletes. A per-key counter that restarts on delete
// fails here; through a Fence's version cache it would let a push at a low
// epoch land over a record at a higher one.
func testTokensAfterDelete(t *testing.T, sc *scope) {
	d := capability[writefence.Deleter](t, sc)
	key := sc.key("recreated")
	named := map[string][]byte{} // every token seen, and the contents it named
	note := func(call, version string, data []byte) {
		t.Helper()
		if prev, ok := named[version]; ok && !bytes.Equal(prev, data) {
			t.Fatalf("%s returned version %q for %s, but that version named %s before: a token names two contents across a delete",
				call, version, describe(data), describe(prev))
		}
		named[version] = data
	}
	for cycle := range 3 {
		expect := ""
		for _, step := range []string{"create", "update"} {
			data := fmt.Appendf(nil, "cycle %d %s", cycle, step)
			expect = put(t, sc.s, key, data, expect)
			note(fmt.Sprintf("PutIfVersion(%q) of cycle %d's %s", key, cycle, step), expect, data)
			got, v, err := sc.s.Get(t.Context(), key)
			if err != nil {
				t.Fatalf("Get(%q): %v", key, err)
			}
			note(fmt.Sprintf("Get(%q)", key), v, got)
			if !bytes.Equal(got, data) || v != expect {
				t.Fatalf("Get(%q) returned %s version %q; want %q version %q", key, describe(got), v, data, expect)
			}
		}
		if err := d.Delete(t.Context(), key); err != nil {
			t.Fatalf("Delete(%q): %v", key, err)
		}
		wantMissing(t, sc.s, key)
	}
}

func testPayloadEmpty(t *testing.T, sc *scope) {
	key := sc.key("empty")
	v := put(t, sc.s, key, []byte{}, "")
	wantContent(t, sc.s, key, nil, v)
	// A nil slice is an empty payload too.
	v = put(t, sc.s, key, nil, v)
	wantContent(t, sc.s, key, []byte{}, v)
}

func testPayloadAllBytes(t *testing.T, sc *scope) {
	key := sc.key("binary")
	data := make([]byte, 512)
	for i := range 256 {
		data[i] = byte(i)
		data[511-i] = byte(i) // and again backwards, so no value only ends the payload
	}
	v := put(t, sc.s, key, data, "")
	wantContent(t, sc.s, key, data, v)
}

func testPayloadLarge(t *testing.T, sc *scope) {
	key := sc.key("large")
	data := make([]byte, 1<<20)
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	v := put(t, sc.s, key, data, "")
	wantContent(t, sc.s, key, data, v)
}

func testAliasingPut(t *testing.T, sc *scope) {
	key := sc.key("alias-put")
	buf := []byte("first")
	v := put(t, sc.s, key, buf, "")
	copy(buf, "XXXXX")
	wantContent(t, sc.s, key, []byte("first"), v)

	buf = []byte("second")
	v = put(t, sc.s, key, buf, v)
	copy(buf, "YYYYYY")
	wantContent(t, sc.s, key, []byte("second"), v)
}

func testAliasingGet(t *testing.T, sc *scope) {
	key := sc.key("alias-get")
	v := put(t, sc.s, key, []byte("stored"), "")
	got, _, err := sc.s.Get(t.Context(), key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	for i := range got {
		got[i] = 'X'
	}
	wantContent(t, sc.s, key, []byte("stored"), v)
}

// wantCanceled fails the test unless err reports the cancellation, and
// only the cancellation.
func wantCanceled(t *testing.T, err error, call string) {
	t.Helper()
	wantOnly(t, err, call+" with a cancelled context", "context.Canceled", context.Canceled,
		writefence.ErrConflict, writefence.ErrNotFound)
}

func canceledContext(t *testing.T) context.Context {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	return ctx
}

func testCanceledGet(t *testing.T, sc *scope) {
	key := sc.key("canceled-get")
	put(t, sc.s, key, []byte("stored"), "")
	_, _, err := sc.s.Get(canceledContext(t), key)
	wantCanceled(t, err, fmt.Sprintf("Get(%q)", key))
}

func testCanceledPut(t *testing.T, sc *scope) {
	key := sc.key("canceled-create")
	_, err := sc.s.PutIfVersion(canceledContext(t), key, []byte("never"), "")
	wantCanceled(t, err, fmt.Sprintf("create-only PutIfVersion(%q)", key))
	wantMissing(t, sc.s, key)

	key = sc.key("canceled-update")
	v := put(t, sc.s, key, []byte("stored"), "")
	_, err = sc.s.PutIfVersion(canceledContext(t), key, []byte("never"), v)
	wantCanceled(t, err, fmt.Sprintf("PutIfVersion(%q) with the current version", key))
	wantContent(t, sc.s, key, []byte("stored"), v)
}
