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

// The checks of writefence.ConsistentBlobLister, run when the store
// declares it as its own (writefence.Capable), and of writefence.StatBlobs,
// which a Fence's Commit checks its new blobs with, run on every store
// that holds blobs: through the store's consistent listing where it
// declares one, else through StatBlob.

// listConsistentRounds is how many rounds of creates and deletes
// Blobs/ListConsistent lists right after.
const listConsistentRounds = 4

// consistentLister returns the store's ConsistentBlobLister when the store
// declares it and holds blobs, and skips the test otherwise.
func consistentLister(t *testing.T, sc *scope) (writefence.BlobStore, writefence.ConsistentBlobLister) {
	t.Helper()
	bs := blobStore(t, sc)
	switch own, has := declared[writefence.ConsistentBlobLister](sc.s); {
	case !has:
		t.Skip("the store does not implement writefence.ConsistentBlobLister: a Commit checks its blobs with StatBlob")
	case !own:
		t.Skip("the store implements writefence.ConsistentBlobLister but does not declare it as its own (writefence.Capable): a Commit checks its blobs with StatBlob")
	}
	t.Log("a Commit checks its blobs with a listing: the store declares writefence.ConsistentBlobLister as its own (writefence.Capable)")
	return bs, sc.s.(writefence.ConsistentBlobLister)
}

// consistentListed returns what ListBlobsConsistent(prefix, after)
// called fn with, by key.
func consistentListed(t *testing.T, l writefence.ConsistentBlobLister, prefix, after string) map[string][]writefence.BlobInfo {
	t.Helper()
	return listedBy(t, fmt.Sprintf("ListBlobsConsistent(after %q)", after), func(ctx context.Context, p string, fn func(writefence.BlobInfo) error) error {
		return l.ListBlobsConsistent(ctx, p, after, fn)
	}, prefix)
}

// testBlobListConsistent creates blobs and, right after the creates
// return, lists them with ListBlobsConsistent; then deletes some and, right
// after the deletes return, lists again, for several rounds: every blob
// created is listed exactly once, with StatBlob's size and a time that
// agrees with StatBlob's, and no blob deleted is, nor any key outside the
// prefix; each round lists from the start, and after a key (one that
// exists, and one shorter by its last byte, as a commit asks): only the
// keys that sort after it. A Commit takes a blob the listing does not show for missing
// until StatBlob says otherwise, and one it shows for there: a listing
// that shows a deleted blob would let a commit reference it. An error
// from fn stops the listing; a cancelled context stops it with the
// context's error. Of manyBlobs blobs under one prefix, as a commit lists
// up to 2,000, ListBlobsConsistent and ListBlobs list each once, and
// ListBlobsConsistent after the third of them those after it.
func testBlobListConsistent(t *testing.T, sc *scope) {
	bs, l := consistentLister(t, sc)
	base := sc.prefix + "consistent/"
	beside := sc.blobKey("consistentx")
	createBlob(t, bs, beside, blobBytes{70, 3})
	live := map[string]writefence.BlobInfo{}
	var gone []string
	for round := range listConsistentRounds {
		for i := range 6 {
			key := sc.blobKey(fmt.Sprintf("consistent/%d-%d", round, i))
			createBlob(t, bs, key, blobBytes{uint64(100*round + i), int64(1 + 37*i)})
			live[key] = writefence.BlobInfo{}
		}
		wantConsistentFrom(t, bs, l, base, live, gone, "after the creates returned")
		for i, k := range slices.Sorted(maps.Keys(live)) {
			if i%3 != round%3 {
				continue
			}
			if err := bs.DeleteBlob(t.Context(), k); err != nil {
				t.Fatalf("DeleteBlob(%q): %v", k, err)
			}
			delete(live, k)
			gone = append(gone, k)
		}
		wantConsistentFrom(t, bs, l, base, live, gone, "after the deletes returned")
	}

	errStop := errors.New("writefencetest: stop listing")
	calls := 0
	err := l.ListBlobsConsistent(t.Context(), base, "", func(writefence.BlobInfo) error { calls++; return errStop })
	if !errors.Is(err, errStop) || calls != 1 {
		t.Errorf("ListBlobsConsistent(%q) with an fn that fails at once: %v after %d calls; want fn's error after one", base, err, calls)
	}
	err = l.ListBlobsConsistent(canceledContext(t), base, "", func(writefence.BlobInfo) error { return nil })
	wantCanceled(t, err, fmt.Sprintf("ListBlobsConsistent(%q)", base))

	many := createManyBlobs(t, sc, bs, "consistent-many/")
	prefix := sc.prefix + "consistent-many/"
	for name, got := range map[string]map[string][]writefence.BlobInfo{
		"ListBlobsConsistent": consistentListed(t, l, prefix, ""), "ListBlobs": listedBlobs(t, bs, prefix)} {
		counts := map[string]int{}
		for k, infos := range got {
			counts[k] = len(infos)
		}
		wantListedOnce(t, fmt.Sprintf("%s(%q) of %d blobs", name, prefix, len(many)), counts, many, "")
	}
	// From the middle, over the pages after it.
	sorted := slices.Sorted(slices.Values(many))
	after := sorted[len(sorted)/3]
	counts := map[string]int{}
	for k, infos := range consistentListed(t, l, prefix, after) {
		counts[k] = len(infos)
	}
	wantListedOnce(t, fmt.Sprintf("ListBlobsConsistent(%q, after %q) of %d blobs", prefix, after, len(many)), counts, sorted[len(sorted)/3+1:], "")
	// In few requests where the store batches; the cleanup gets the rest.
	_, _ = writefence.DeleteBlobs(t.Context(), sc.s, many)
}

// wantConsistentFrom runs wantConsistent from the start of prefix, after
// the middle key of live, and after that key shorter by its last byte.
func wantConsistentFrom(t *testing.T, bs writefence.BlobStore, l writefence.ConsistentBlobLister, prefix string, live map[string]writefence.BlobInfo, gone []string, when string) {
	t.Helper()
	sorted := slices.Sorted(maps.Keys(live))
	mid := sorted[len(sorted)/2]
	for _, after := range []string{"", mid, mid[:len(mid)-1]} {
		wantConsistent(t, bs, l, prefix, after, live, gone, when)
	}
}

// wantConsistent fails the test unless ListBlobsConsistent(prefix, after)
// lists each key of live that sorts after after once, agreeing with its
// StatBlob, and nothing else; gone are deleted keys. It fills in live's
// infos from StatBlob.
func wantConsistent(t *testing.T, bs writefence.BlobStore, l writefence.ConsistentBlobLister, prefix, after string, live map[string]writefence.BlobInfo, gone []string, when string) {
	t.Helper()
	got := consistentListed(t, l, prefix, after)
	when = fmt.Sprintf("%s, after %q", when, after)
	for _, k := range slices.Sorted(maps.Keys(live)) {
		if k <= after {
			if len(got[k]) != 0 {
				t.Errorf("ListBlobsConsistent(%q) %s listed %q, which does not sort after it", prefix, when, k)
			}
			continue
		}
		stat := statBlob(t, bs, k)
		live[k] = stat
		switch infos := got[k]; {
		case len(infos) == 0:
			t.Errorf("ListBlobsConsistent(%q) %s did not list %q, which exists: a commit would take it for missing", prefix, when, k)
		case len(infos) > 1:
			t.Errorf("ListBlobsConsistent(%q) %s listed %q %d times; want once", prefix, when, k, len(infos))
		default:
			call := fmt.Sprintf("ListBlobsConsistent(%q) %s, of %q", prefix, when, k)
			wantInfo(t, call, infos[0], k, stat.Size)
			wantAgree(t, call, infos[0], stat)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(got)) {
		switch _, ok := live[k]; {
		case ok:
		case slices.Contains(gone, k):
			t.Errorf("ListBlobsConsistent(%q) %s listed %q, whose DeleteBlob had returned: a commit could reference a deleted blob", prefix, when, k)
		default:
			t.Errorf("ListBlobsConsistent(%q) %s listed %q, which does not start with the prefix or was never created", prefix, when, k)
		}
	}
}

// testStatBlobs checks writefence.StatBlobs, the helper a Commit checks
// its new blobs with, on every store that holds blobs: over two prefixes,
// one holding several blobs (which a store that declares
// writefence.ConsistentBlobLister lists) and one holding one, it returns
// exactly the keys that exist, each with StatBlob's size and a time that
// agrees with StatBlob's, and leaves out a deleted key and one never
// created. With a prefix that no key starts with, an error matching
// writefence.ErrInvalidArgument.
func testStatBlobs(t *testing.T, sc *scope) {
	bs := blobStore(t, sc)
	logPaths(t, sc, "StatBlobs")
	many, one := sc.prefix+"stats/0001-", sc.prefix+"stats/0002-"
	keys := createBlobs(t, sc, bs, "stats/0001-", 5, 200, 10)
	want := map[string]writefence.BlobInfo{}
	single := sc.blobKey("stats/0002-a")
	createBlob(t, bs, single, blobBytes{210, 7})
	deleted, never := sc.blobKey("stats/0001-deleted"), sc.blobKey("stats/0001-never")
	createBlob(t, bs, deleted, blobBytes{211, 9})
	if err := bs.DeleteBlob(t.Context(), deleted); err != nil {
		t.Fatalf("DeleteBlob(%q): %v", deleted, err)
	}
	for _, k := range append(slices.Clone(keys), single) {
		want[k] = statBlob(t, bs, k)
	}
	keys = append(keys, single, deleted, never)
	got, err := writefence.StatBlobs(t.Context(), sc.s, []string{many, one}, keys)
	call := fmt.Sprintf("writefence.StatBlobs(%q, %q)", many, one)
	if err != nil {
		t.Fatalf("%s: %v", call, err)
	}
	for _, k := range slices.Sorted(maps.Keys(want)) {
		info, ok := got[k]
		if !ok {
			t.Errorf("%s left out %q, which exists", call, k)
			continue
		}
		wantInfo(t, call+" of "+k, info, k, want[k].Size)
		wantAgree(t, call+" of "+k, info, want[k])
	}
	for _, k := range []string{deleted, never} {
		if info, ok := got[k]; ok {
			t.Errorf("%s returned %s for %q, which does not exist", call, describeInfo(info), k)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%s returned %d blobs; want %d", call, len(got), len(want))
	}
	_, err = writefence.StatBlobs(t.Context(), sc.s, []string{one}, keys)
	wantOnly(t, err, "writefence.StatBlobs of keys outside its prefixes", "writefence.ErrInvalidArgument", writefence.ErrInvalidArgument)
	_, err = writefence.StatBlobs(canceledContext(t), sc.s, []string{many, one}, keys)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("%s with a cancelled context: %v; want an error matching context.Canceled", call, err)
	}
}
