package writefencetest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/writefence/writefence"
)

// The checks of writefence.Lister, run when the store implements it (by
// type assertion, as the Fence's tools find it).

// lister returns the store's Lister, or skips the test when it has none.
func lister(t *testing.T, sc *scope) writefence.Lister {
	t.Helper()
	return implemented[writefence.Lister](t, sc, "Lister")
}

// listed returns how often List(prefix) called fn with each key.
func listed(t *testing.T, l writefence.Lister, prefix string) map[string]int {
	t.Helper()
	got := map[string]int{}
	if err := l.List(t.Context(), prefix, func(key string) error { got[key]++; return nil }); err != nil {
		t.Fatalf("List(%q): %v", prefix, err)
	}
	return got
}

// wantListed fails the test unless List(prefix) lists each key of want
// exactly once and nothing else; gone names deleted keys.
func wantListed(t *testing.T, l writefence.Lister, prefix string, want []string, gone string) {
	t.Helper()
	wantListedOnce(t, fmt.Sprintf("List(%q)", prefix), listed(t, l, prefix), want, gone)
}

// wantListedOnce fails the test unless the listing call, which listed
// each key of counts that many times, listed each key of want exactly
// once and no other key; gone, when not "", is a deleted key.
func wantListedOnce(t *testing.T, call string, counts map[string]int, want []string, gone string) {
	t.Helper()
	for _, k := range want {
		if n := counts[k]; n != 1 {
			t.Errorf("%s listed %q %d times; want once", call, k, n)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		switch {
		case slices.Contains(want, k):
		case k == gone && gone != "":
			t.Errorf("%s listed %q, which was deleted", call, k)
		default:
			t.Errorf("%s listed %q, which does not start with the prefix or was never written", call, k)
		}
	}
}

// testListPrefix writes keys inside a prefix, at several depths, and keys
// that share its first bytes but lie outside it: List returns each key
// inside exactly once, and none outside; a key deleted before the listing
// (with a Deleter) is not listed. A prefix that ends inside a name lists
// the keys that start with it, "/" or not. No key is also the "directory"
// of another (an object "a" beside an object "a/b"), which some S3 servers
// cannot list and writefence never writes.
func testListPrefix(t *testing.T, sc *scope) {
	l := lister(t, sc)
	base := sc.prefix + "list/"
	inside := []string{base + "a", base + "b/c", base + "b/d/e", base + "z"}
	outside := []string{sc.prefix + "listed", sc.prefix + "list-other/a", sc.prefix + "lis", sc.prefix + "lisT/a"}
	for _, k := range append(slices.Clone(inside), outside...) {
		put(t, sc.s, sc.track(k), []byte("listed "+k), "")
	}
	gone := ""
	if d, ok := sc.s.(writefence.Deleter); ok {
		gone = sc.key("list/deleted")
		put(t, sc.s, gone, []byte("deleted before the listing"), "")
		if err := d.Delete(t.Context(), gone); err != nil {
			t.Fatalf("Delete(%q): %v", gone, err)
		}
	}
	wantListed(t, l, base, inside, gone)
	wantListed(t, l, sc.prefix+"list", append(slices.Clone(inside), outside[:2]...), gone)
}

// listKeys writes three keys under a fresh prefix and returns the prefix.
func listKeys(t *testing.T, sc *scope) string {
	t.Helper()
	base := sc.prefix + "list/"
	for _, name := range []string{"a", "b", "c"} {
		put(t, sc.s, sc.key("list/"+name), []byte(name), "")
	}
	return base
}

// testListStop checks that List stops at fn's first error and returns it.
func testListStop(t *testing.T, sc *scope) {
	l := lister(t, sc)
	base := listKeys(t, sc)
	errStop := errors.New("writefencetest: stop listing")
	calls := 0
	err := l.List(t.Context(), base, func(string) error { calls++; return errStop })
	if !errors.Is(err, errStop) {
		t.Errorf("List(%q) with an fn that fails: %v; want fn's error", base, err)
	}
	if calls != 1 {
		t.Errorf("List(%q) called an fn that failed %d times; want once, then stop", base, calls)
	}
}

// testListCanceled checks that a cancelled context stops List with ctx's
// error: cancelled before the listing, and cancelled by fn at the first
// key of three.
func testListCanceled(t *testing.T, sc *scope) {
	l := lister(t, sc)
	base := listKeys(t, sc)
	err := l.List(canceledContext(t), base, func(string) error { return nil })
	wantCanceled(t, err, fmt.Sprintf("List(%q)", base))

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	calls := 0
	err = l.List(ctx, base, func(string) error {
		if calls++; calls == 1 {
			cancel()
		}
		return nil
	})
	wantCanceled(t, err, fmt.Sprintf("List(%q) cancelled by fn at the first of 3 keys (fn called %d times)", base, calls))
}
