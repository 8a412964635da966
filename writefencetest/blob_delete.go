package writefencetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/writefence/writefence"
)

// testDeleteBlobs checks writefence.DeleteBlobs, which Collect deletes
// through, on every store that holds blobs: through the store's
// writefence.BlobBatchDeleter where it declares one, else DeleteBlob of
// each key. Of blobs under a prefix and a key never created, it returns
// every key, with no error; then none of them is left, by StatBlob and
// ListBlobs, and a blob beside them, whose key the others' extend, is
// untouched. With a cancelled context it fails with the context's error.
// On a store that declares writefence.BlobBatchDeleter it then deletes
// manyBlobs blobs in one call, as Collect deletes thousands: every key is
// returned once, and none is left.
func testDeleteBlobs(t *testing.T, sc *scope) {
	bs := blobStore(t, sc)
	logPaths(t, sc, "DeleteBlobs")
	base := sc.prefix + "batch/"
	keys := createBlobs(t, sc, bs, "batch/", 7, 300, 3)
	beside := sc.blobKey("batch")
	createBlob(t, bs, beside, blobBytes{310, 5})
	keys = append(keys, sc.blobKey("batch/never"))

	_, err := writefence.DeleteBlobs(canceledContext(t), sc.s, keys)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("writefence.DeleteBlobs of %d keys with a cancelled context: %v; want an error matching context.Canceled", len(keys), err)
	}
	deleted, err := writefence.DeleteBlobs(t.Context(), sc.s, keys)
	call := fmt.Sprintf("writefence.DeleteBlobs of %d keys, one never created", len(keys))
	if err != nil {
		t.Fatalf("%s: %v", call, err)
	}
	if got, want := slices.Sorted(slices.Values(deleted)), slices.Sorted(slices.Values(keys)); !slices.Equal(got, want) {
		t.Errorf("%s returned %q; want every key, %q (a missing key counts as deleted)", call, got, want)
	}
	for _, k := range keys {
		if _, err := bs.StatBlob(t.Context(), k); !errors.Is(err, writefence.ErrNotFound) {
			t.Errorf("StatBlob(%q) after %s: %v; want an error matching writefence.ErrNotFound", k, call, err)
		}
	}
	for k := range listedBlobs(t, bs, base) {
		if slices.Contains(keys, k) {
			t.Errorf("ListBlobs(%q) listed %q after %s", base, k, call)
		}
	}
	statBlob(t, bs, beside)

	if own, _ := declared[writefence.BlobBatchDeleter](sc.s); !own {
		return
	}
	many := createManyBlobs(t, sc, bs, "batch-many/")
	deleted, err = writefence.DeleteBlobs(t.Context(), sc.s, many)
	call = fmt.Sprintf("writefence.DeleteBlobs of %d keys", len(many))
	if err != nil {
		t.Fatalf("%s: %v", call, err)
	}
	if got := slices.Sorted(slices.Values(deleted)); !slices.Equal(got, many) {
		t.Errorf("%s returned %d keys; want each of them once", call, len(got))
	}
	left := 0
	for k := range listedBlobs(t, bs, sc.prefix+"batch-many/") {
		if _, ok := slices.BinarySearch(many, k); ok {
			left++
		}
	}
	if left > 0 {
		t.Errorf("ListBlobs listed %d of the keys after %s, which returned no error", left, call)
	}
}
