package writefencetest

import (
	"errors"
	"fmt"
	"testing"

	"github.com/writefence/writefence"
)

// testWriteBlob checks writefence.WriteBlob, which a Fence's PutBlob
// writes through, on every store that holds blobs: through the store's
// writefence.BlobWriter where it declares one, else through CreateBlob.
// Blobs of 0 bytes, 1 byte and two parts and a byte, from readers that
// yield them in small chunks: WriteBlob reads each to io.EOF and returns
// the size written, and StatBlob and OpenBlob agree. A second WriteBlob
// of an existing key is refused with ErrConflict, leaving the blob as it
// was, or replaces it whole (as CreateBlob may); a reader that fails
// fails the write with its error and leaves no blob.
func testWriteBlob(t *testing.T, sc *scope) {
	bs := blobStore(t, sc)
	logPaths(t, sc, "WriteBlob")
	for _, c := range []namedBlob{
		{"empty", blobBytes{400, 0}},
		{"one-byte", blobBytes{401, 1}},
		{"parts", blobBytes{402, 2*sc.blobPart() + 1}},
	} {
		key := sc.blobKey("write-" + c.name)
		r := c.b.reader()
		size, err := writefence.WriteBlob(t.Context(), sc.s, key, r)
		call := fmt.Sprintf("writefence.WriteBlob(%q) of a reader of %d bytes", key, c.b.size)
		if err != nil {
			t.Fatalf("%s: %v", call, err)
		}
		if !r.ended {
			t.Errorf("%s returned before reading its reader to io.EOF (%d bytes left)", call, r.left)
		}
		if size != c.b.size {
			t.Errorf("%s returned size %d; want %d", call, size, c.b.size)
		}
		wantInfo(t, fmt.Sprintf("StatBlob(%q)", key), statBlob(t, bs, key), key, c.b.size)
		readsBack(t, bs, key, c.b, "after "+call)
	}

	key := sc.blobKey("write-twice")
	first, second := blobBytes{410, 3000}, blobBytes{411, 1000}
	if _, err := writefence.WriteBlob(t.Context(), sc.s, key, first.reader()); err != nil {
		t.Fatalf("writefence.WriteBlob(%q): %v", key, err)
	}
	_, err := writefence.WriteBlob(t.Context(), sc.s, key, second.reader())
	switch {
	case err == nil:
		wantHolds(t, bs, key, second, "the second write's bytes, which it says it wrote")
	case errors.Is(err, writefence.ErrConflict):
		wantHolds(t, bs, key, first, "the first write's bytes: a refused write must leave the blob as it was")
	default:
		t.Errorf("a second writefence.WriteBlob(%q) of an existing key: %v; want an error matching writefence.ErrConflict, or nil from a store that replaces the blob whole", key, err)
	}

	failing := sc.blobKey("write-failing")
	_, err = writefence.WriteBlob(t.Context(), sc.s, failing, blobBytes{412, 3000}.failing(errReaderBroke))
	wantOnly(t, err, fmt.Sprintf("writefence.WriteBlob(%q) from a reader that fails", failing), "the reader's error", errReaderBroke, writefence.ErrConflict, writefence.ErrNotFound)
	wantNoBlob(t, bs, failing, "after a writefence.WriteBlob whose reader failed")
}
