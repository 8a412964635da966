package writefencetest

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/keys"
)

// The checks of writefence.BlobStore, run when the store declares it as
// its own (writefence.Capable): the rule by which a Fence keeps blobs on a
// store, so the methods checked are those a Fence's PutBlob, Commit,
// OpenBlob and Collect call. writefence has no helper for blobs that
// falls back to the core methods: a store that does not declare
// BlobStore keeps no blobs, and the checks are skipped, saying why.

// blobChecks are the clauses of writefence.BlobStore; the race of
// CreateBlob is Race/CreateBlob.
var blobChecks = []check{
	{"RoundTrip", testBlobRoundTrip},
	{"CreateOnly", testBlobCreateOnly},
	{"FailingReader", testBlobFailingReader},
	{"List", testBlobList},
	{"Missing", testBlobMissing},
	{"Delete", testBlobDelete},
	{"Clock", testBlobClock},
	{"Canceled", testBlobCanceled},
	{"Fence", testBlobFence},
	{"ListConsistent", testBlobListConsistent},
	{"StatBlobs", testStatBlobs},
	{"DeleteBlobs", testDeleteBlobs},
	{"WriteBlob", testWriteBlob},
	{"Collect", testBlobCollect},
}

// defaultBlobPart is the part size the blob checks assume when
// Options.BlobPartSize is not set: 5 MiB, the least S3 allows for a part
// of a multipart upload.
const defaultBlobPart = 5 << 20

// blobClockSlack is how far two times a store gives for one blob, or for
// blobs created one after the other, may disagree: S3's Last-Modified has
// one-second resolution, while its listing gives milliseconds.
const blobClockSlack = time.Second

// Why a store keeps no blobs, and the log of one that does.
const (
	blobsDeclared   = "a Fence keeps blobs on this store through its own writefence.BlobStore methods: the store declares BlobStore as its own (writefence.Capable)"
	blobsUndeclared = "the store implements writefence.BlobStore but does not declare it as its own (writefence.Capable), so a Fence keeps no blobs on it"
	blobsNone       = "the store does not implement writefence.BlobStore, so a Fence keeps no blobs on it"
	blobsReplaced   = "this store's CreateBlob replaced an existing key whole instead of refusing it with writefence.ErrConflict: its create-only is not decided by the store, and a Fence is safe on it only because every blob key a Fence creates holds a fresh random id"
)

// blobStore returns the store's BlobStore when the store declares it, and
// skips the test otherwise. The blobs the test creates under its prefix
// are deleted when it ends.
func blobStore(t *testing.T, sc *scope) writefence.BlobStore {
	t.Helper()
	switch own, has := declared[writefence.BlobStore](sc.s); {
	case !has:
		t.Skip(blobsNone)
	case !own:
		t.Skip(blobsUndeclared)
	}
	t.Log(blobsDeclared)
	bs := sc.s.(writefence.BlobStore)
	t.Cleanup(func() { sc.deleteBlobs(t, bs) })
	return bs
}

// blobKey returns a blob key under the subtest's prefix and remembers it
// for cleanup.
func (sc *scope) blobKey(name string) string {
	key := sc.prefix + name
	sc.mu.Lock()
	sc.blobs = append(sc.blobs, key)
	sc.mu.Unlock()
	return key
}

// deleteBlobs deletes every blob key handed out and every blob listed
// under the subtest's prefix (the Fence's, and any a failed create left).
// A key already gone is no failure here; Blobs/Missing checks that
// DeleteBlob of one returns nil.
func (sc *scope) deleteBlobs(t *testing.T, bs writefence.BlobStore) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	sc.mu.Lock()
	doomed := slices.Clone(sc.blobs)
	sc.mu.Unlock()
	err := bs.ListBlobs(ctx, sc.prefix, func(b writefence.BlobInfo) error {
		if strings.HasPrefix(b.Key, sc.prefix) {
			doomed = append(doomed, b.Key)
		}
		return nil
	})
	if err != nil {
		t.Errorf("cleanup: ListBlobs(%q): %v", sc.prefix, err)
	}
	slices.Sort(doomed)
	for _, k := range slices.Compact(doomed) {
		if err := bs.DeleteBlob(ctx, k); err != nil && !errors.Is(err, writefence.ErrNotFound) {
			t.Errorf("cleanup: DeleteBlob(%q): %v", k, err)
		}
	}
}

// blobPart returns the part size the checks assume.
func (sc *scope) blobPart() int64 {
	if sc.opts.BlobPartSize > 0 {
		return sc.opts.BlobPartSize
	}
	return defaultBlobPart
}

// blobBytes is a blob's content: size bytes of a pseudo-random stream
// named by seed. They are generated as the store reads them and checked as
// they are read back, so the kit never holds a large blob whole.
type blobBytes struct {
	seed uint64
	size int64
}

// bytes returns the content whole, for the small blobs.
func (b blobBytes) bytes() []byte {
	p := make([]byte, b.size)
	newStream(b.seed).Read(p)
	return p
}

func newStream(seed uint64) *rand.ChaCha8 {
	var s [32]byte
	binary.LittleEndian.PutUint64(s[:], seed)
	return rand.NewChaCha8(s)
}

// reader returns a reader of the content that yields it in small chunks
// of varying size, the last together with io.EOF, as an io.Reader may:
// a store must read to io.EOF, not to the first short read.
func (b blobBytes) reader() *chunkReader {
	return &chunkReader{src: newStream(b.seed), left: b.size, end: io.EOF}
}

// failing returns a reader of the content that fails with err where the
// content ends, instead of reaching io.EOF.
func (b blobBytes) failing(err error) *chunkReader {
	r := b.reader()
	r.end = err
	return r
}

// maxChunk bounds the chunks a chunkReader yields.
const maxChunk = 4096

// chunkReader yields its bytes in chunks of 1 to maxChunk bytes, and then
// end.
type chunkReader struct {
	src   io.Reader
	left  int64
	end   error // io.EOF, or the failure of a failing reader
	reads int
	ended bool // whether end was returned
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if r.left == 0 {
		r.ended = true
		return 0, r.end
	}
	if len(p) == 0 {
		return 0, nil
	}
	r.reads++
	n := int(min(int64(len(p)), int64(1+(r.reads*7919)%maxChunk), r.left))
	r.src.Read(p[:n])
	r.left -= int64(n)
	if r.left == 0 {
		r.ended = true
		return n, r.end
	}
	return n, nil
}

// diff reads r to its end and reports how what it yields differs from the
// content: "" when it is exactly the content. It reads at most a chunk
// past the content's size.
func (b blobBytes) diff(r io.Reader) (string, error) {
	want := newStream(b.seed)
	got := make([]byte, 32<<10)
	exp := make([]byte, len(got))
	var off int64
	for {
		n, err := io.ReadFull(r, got)
		if m := min(int64(n), b.size-off); m > 0 {
			want.Read(exp[:m])
			if i := firstDiff(got[:m], exp[:m]); i >= 0 {
				return fmt.Sprintf("differs from the bytes written at byte %d of %d", off+int64(i), b.size), nil
			}
		}
		if off+int64(n) > b.size {
			return fmt.Sprintf("runs on past the %d bytes written", b.size), nil
		}
		off += int64(n)
		switch {
		case err == io.EOF || err == io.ErrUnexpectedEOF:
			if off < b.size {
				return fmt.Sprintf("ends after %d of the %d bytes written", off, b.size), nil
			}
			return "", nil
		case err != nil:
			return "", err
		}
	}
}

// firstDiff returns the index of the first byte where a and b, of one
// length, differ, or -1.
func firstDiff(a, b []byte) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}

// createBlob creates key with b's content and fails the test unless the
// create succeeds with b's size.
func createBlob(t *testing.T, bs writefence.BlobStore, key string, b blobBytes) writefence.BlobInfo {
	t.Helper()
	info, err := bs.CreateBlob(t.Context(), key, b.reader())
	if err != nil {
		t.Fatalf("CreateBlob(%q, %d bytes): %v", key, b.size, err)
	}
	if info.Size != b.size {
		t.Errorf("CreateBlob(%q, %d bytes) returned size %d", key, b.size, info.Size)
	}
	return info
}

// statBlob returns key's info, failing the test on an error.
func statBlob(t *testing.T, bs writefence.BlobStore, key string) writefence.BlobInfo {
	t.Helper()
	info, err := bs.StatBlob(t.Context(), key)
	if err != nil {
		t.Fatalf("StatBlob(%q): %v", key, err)
	}
	return info
}

// readBlob returns the blob at key whole, for the small blobs.
func readBlob(t *testing.T, bs writefence.BlobStore, key string) []byte {
	t.Helper()
	rc, _, err := bs.OpenBlob(t.Context(), key)
	if err != nil {
		t.Fatalf("OpenBlob(%q): %v", key, err)
	}
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("reading OpenBlob(%q): %v", key, err)
	}
	return data
}

// wantInfo fails the test unless info, which call returned, describes the
// blob at key of size bytes, with a creation time.
func wantInfo(t *testing.T, call string, info writefence.BlobInfo, key string, size int64) {
	t.Helper()
	if info.Key != key {
		t.Errorf("%s returned Key %q; want %q", call, info.Key, key)
	}
	if info.Size != size {
		t.Errorf("%s returned Size %d; want %d, the bytes written", call, info.Size, size)
	}
	if info.Modified.IsZero() {
		t.Errorf("%s returned a zero Modified; want the blob's creation time by the store's clock (Collect would take the blob for ancient)", call)
	}
}

// agree reports whether a and b, two accounts of one blob, agree: the same
// key and size, and times within blobClockSlack.
func agree(a, b writefence.BlobInfo) bool {
	d := a.Modified.Sub(b.Modified).Abs()
	return a.Key == b.Key && a.Size == b.Size && d <= blobClockSlack
}

// describeInfo formats info for a failure message.
func describeInfo(info writefence.BlobInfo) string {
	return fmt.Sprintf("{Key %q, Size %d, Modified %s}", info.Key, info.Size, stamp(info.Modified))
}

// stamp formats a time for a failure message, without its monotonic
// reading.
func stamp(t time.Time) string { return t.Format(time.RFC3339Nano) }

// wantAgree fails the test unless info, which call returned, agrees with
// stat, StatBlob's.
func wantAgree(t *testing.T, call string, info, stat writefence.BlobInfo) {
	t.Helper()
	if !agree(info, stat) {
		t.Errorf("%s returned %s; StatBlob returned %s: they must agree (times within %v)", call, describeInfo(info), describeInfo(stat), blobClockSlack)
	}
}

// namedBlob is a case of a check over blobs: the blob's bytes, and the
// name of the case, which its key ends with.
type namedBlob struct {
	name string
	b    blobBytes
}

// blobFirstChunk is the most a store may read of a blob before it chooses
// between one request and an upload in parts (S3's adapter reads 5 MiB,
// GCS's 1 MiB): the round trip goes two parts past it. Only the package's
// own tests change it, for their in-memory doubles, which read every
// blob whole and so have no first chunk.
var blobFirstChunk int64 = 5 << 20

// testBlobRoundTrip streams blobs of 0 bytes, 1 byte, a part less a byte,
// a part, two parts and a byte, and two parts past blobFirstChunk, in
// small chunks, and reads them back: the same bytes, the size written, a
// creation time, and CreateBlob, StatBlob and OpenBlob agreeing on them.
func testBlobRoundTrip(t *testing.T, sc *scope) {
	bs := blobStore(t, sc)
	for _, c := range []namedBlob{
		{"empty", blobBytes{1, 0}},
		{"one-byte", blobBytes{2, 1}},
		{"part-less-a-byte", blobBytes{4, sc.blobPart() - 1}},
		{"part", blobBytes{5, sc.blobPart()}},
		{"parts", blobBytes{3, 2*sc.blobPart() + 1}},
		{"past-first-chunk", blobBytes{6, blobFirstChunk + 2*sc.blobPart() + 12345}},
	} {
		key := sc.blobKey("roundtrip-" + c.name)
		r := c.b.reader()
		info, err := bs.CreateBlob(t.Context(), key, r)
		create := fmt.Sprintf("CreateBlob(%q) of a reader of %d bytes", key, c.b.size)
		if err != nil {
			t.Fatalf("%s: %v", create, err)
		}
		if !r.ended {
			t.Errorf("%s returned before reading its reader to io.EOF (%d bytes left)", create, r.left)
		}
		wantInfo(t, create, info, key, c.b.size)
		stat := statBlob(t, bs, key)
		wantInfo(t, fmt.Sprintf("StatBlob(%q)", key), stat, key, c.b.size)
		wantAgree(t, create, info, stat)

		open := readsBack(t, bs, key, c.b, fmt.Sprintf("of a blob of %d bytes", c.b.size))
		wantInfo(t, fmt.Sprintf("OpenBlob(%q)", key), open, key, c.b.size)
		wantAgree(t, fmt.Sprintf("OpenBlob(%q)", key), open, stat)
	}
}

// readsBack opens the blob at key and fails the test unless it reads b;
// when says when it is read. It returns what OpenBlob returned of the
// blob.
func readsBack(t *testing.T, bs writefence.BlobStore, key string, b blobBytes, when string) writefence.BlobInfo {
	t.Helper()
	rc, info, err := bs.OpenBlob(t.Context(), key)
	if err != nil {
		t.Fatalf("OpenBlob(%q): %v", key, err)
	}
	diff, err := b.diff(rc)
	rc.Close()
	switch {
	case err != nil:
		t.Errorf("reading OpenBlob(%q): %v", key, err)
	case diff != "":
		t.Errorf("OpenBlob(%q) %s: what it reads %s", key, when, diff)
	}
	return info
}

// wantHolds fails the test unless the blob at key is b, whole, by its
// bytes and by StatBlob's size.
func wantHolds(t *testing.T, bs writefence.BlobStore, key string, b blobBytes, what string) {
	t.Helper()
	if got := readBlob(t, bs, key); !bytes.Equal(got, b.bytes()) {
		t.Errorf("%q holds %s; want %s, whole", key, describe(got), what)
	}
	if stat := statBlob(t, bs, key); stat.Size != b.size {
		t.Errorf("StatBlob(%q) returned size %d; want %d, the size of %s", key, stat.Size, b.size, what)
	}
}

// testBlobCreateOnly creates a key twice, the second time with shorter
// bytes: the second create is refused with ErrConflict and the first blob
// is as it was, or, on a store that cannot tell on the call it uses, the
// second replaces the first whole, which the check logs. Never a mix:
// shorter bytes written over the first in place would leave its tail.
func testBlobCreateOnly(t *testing.T, sc *scope) {
	bs := blobStore(t, sc)
	key := sc.blobKey("create-only")
	first, second := blobBytes{10, 3000}, blobBytes{11, 1000}
	createBlob(t, bs, key, first)
	before := statBlob(t, bs, key)
	info, err := bs.CreateBlob(t.Context(), key, second.reader())
	call := fmt.Sprintf("a second CreateBlob(%q) of an existing key", key)
	switch {
	case err == nil:
		t.Log(blobsReplaced)
		wantInfo(t, call, info, key, second.size)
		wantHolds(t, bs, key, second, "the second create's bytes, which it says it wrote")
	case errors.Is(err, writefence.ErrConflict):
		wantStoreError(t, err, call, key, "writefence.ErrConflict", writefence.ErrConflict)
		wantHolds(t, bs, key, first, "the first create's bytes: a refused create must leave the blob as it was")
		if after := statBlob(t, bs, key); !after.Modified.Equal(before.Modified) {
			t.Errorf("StatBlob(%q) returned Modified %s after %s was refused, %s before: a refused create must leave the blob as it was",
				key, stamp(after.Modified), call, stamp(before.Modified))
		}
	default:
		t.Errorf("%s: %v; want an error matching writefence.ErrConflict, or nil from a store that cannot tell and replaces the blob whole", call, err)
		got := readBlob(t, bs, key)
		if !bytes.Equal(got, first.bytes()) && !bytes.Equal(got, second.bytes()) {
			t.Errorf("%q holds %s, neither create's bytes whole", key, describe(got))
		}
	}
}

// errReaderBroke is the failure of the checks' failing readers.
var errReaderBroke = errors.New("writefencetest: the reader broke")

// testBlobFailingReader creates blobs from readers that fail at their
// first read, midway through a small blob, and after a part and a byte,
// the last also with io.ErrUnexpectedEOF (a truncated gzip stream's),
// which io.ReadFull's callers may take for an end: CreateBlob fails with
// the reader's error and no blob is left at the key, by StatBlob,
// OpenBlob and ListBlobs.
func testBlobFailingReader(t *testing.T, sc *scope) {
	bs := blobStore(t, sc)
	for _, c := range []struct {
		namedBlob
		err error
	}{
		{namedBlob{"at-start", blobBytes{20, 0}}, errReaderBroke},
		{namedBlob{"midway", blobBytes{21, 3000}}, errReaderBroke},
		{namedBlob{"after-a-part", blobBytes{22, sc.blobPart() + 1}}, errReaderBroke},
		{namedBlob{"cut-short", blobBytes{23, sc.blobPart() + 1}}, io.ErrUnexpectedEOF},
	} {
		key := sc.blobKey("failing-" + c.name)
		_, err := bs.CreateBlob(t.Context(), key, c.b.failing(c.err))
		call := fmt.Sprintf("CreateBlob(%q) from a reader that fails after %d bytes with %v", key, c.b.size, c.err)
		wantOnly(t, err, call, "the reader's error", c.err, writefence.ErrConflict, writefence.ErrNotFound)
		wantNoBlob(t, bs, key, "after "+call)
		listed := 0
		if err := bs.ListBlobs(t.Context(), sc.prefix, func(b writefence.BlobInfo) error {
			if b.Key == key {
				listed++
			}
			return nil
		}); err != nil {
			t.Fatalf("ListBlobs(%q): %v", sc.prefix, err)
		}
		if listed > 0 {
			t.Errorf("ListBlobs(%q) listed %q after %s; want no blob left", sc.prefix, key, call)
		}
	}
}

// wantNoBlob fails the test unless StatBlob and OpenBlob report no blob at
// key.
func wantNoBlob(t *testing.T, bs writefence.BlobStore, key, when string) {
	t.Helper()
	info, err := bs.StatBlob(t.Context(), key)
	if !errors.Is(err, writefence.ErrNotFound) {
		t.Errorf("StatBlob(%q) %s: %s, %v; want an error matching writefence.ErrNotFound", key, when, describeInfo(info), err)
	}
	rc, info, err := bs.OpenBlob(t.Context(), key)
	if err == nil {
		rc.Close()
	}
	if !errors.Is(err, writefence.ErrNotFound) {
		t.Errorf("OpenBlob(%q) %s: %s, %v; want an error matching writefence.ErrNotFound", key, when, describeInfo(info), err)
	}
}

// listedBlobs returns what ListBlobs(prefix) called fn with, by key.
func listedBlobs(t *testing.T, bs writefence.BlobStore, prefix string) map[string][]writefence.BlobInfo {
	t.Helper()
	return listedBy(t, "ListBlobs", bs.ListBlobs, prefix)
}

// listedBy returns what list(prefix), the store's method name, called fn
// with, by key.
func listedBy(t *testing.T, name string, list func(context.Context, string, func(writefence.BlobInfo) error) error, prefix string) map[string][]writefence.BlobInfo {
	t.Helper()
	got := map[string][]writefence.BlobInfo{}
	if err := list(t.Context(), prefix, func(b writefence.BlobInfo) error {
		got[b.Key] = append(got[b.Key], b)
		return nil
	}); err != nil {
		t.Fatalf("%s(%q): %v", name, prefix, err)
	}
	return got
}

// createBlobs creates n blobs at the blob keys name+"0" to name+"<n-1>",
// the ith of blobBytes{seed + i, step * i}, and returns their keys.
func createBlobs(t *testing.T, sc *scope, bs writefence.BlobStore, name string, n int, seed uint64, step int64) []string {
	t.Helper()
	var keys []string
	for i := range n {
		k := sc.blobKey(fmt.Sprintf("%s%d", name, i))
		createBlob(t, bs, k, blobBytes{seed + uint64(i), step * int64(i)})
		keys = append(keys, k)
	}
	return keys
}

// manyBlobs is how many blobs the checks of a listing and a batch delete
// at a Fence's scale create: one more than a page of S3's or GCS's
// listing, and than one DeleteObjects request of S3, hold. A commit lists
// up to 2,000 blobs, and Collect deletes up to 10,000 in one DeleteBlobs.
const manyBlobs = 1001

// createManyBlobs creates manyBlobs blobs of one byte at the keys under
// the subtest's prefix name+"0000" on, 16 at a time, and returns their
// keys. The cleanup finds them by listing the prefix.
func createManyBlobs(t *testing.T, sc *scope, bs writefence.BlobStore, name string) []string {
	t.Helper()
	keys := make([]string, manyBlobs)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s%s%04d", sc.prefix, name, i)
	}
	next := make(chan string)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for k := range next {
				if _, err := bs.CreateBlob(t.Context(), k, bytes.NewReader([]byte{1})); err != nil {
					t.Errorf("CreateBlob(%q, 1 byte): %v", k, err)
				}
			}
		})
	}
	for _, k := range keys {
		next <- k
	}
	close(next)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	return keys
}

// wantBlobsListed fails the test unless ListBlobs(prefix) lists each blob
// of want exactly once, agreeing with its StatBlob, and nothing else; gone
// is a deleted blob's key.
func wantBlobsListed(t *testing.T, bs writefence.BlobStore, prefix string, want map[string]writefence.BlobInfo, gone string) {
	t.Helper()
	got := listedBlobs(t, bs, prefix)
	counts := map[string]int{}
	for k, infos := range got {
		counts[k] = len(infos)
	}
	wantListedOnce(t, fmt.Sprintf("ListBlobs(%q)", prefix), counts, slices.Sorted(maps.Keys(want)), gone)
	for _, k := range slices.Sorted(maps.Keys(want)) {
		for _, info := range got[k] {
			wantInfo(t, fmt.Sprintf("ListBlobs(%q) of %q", prefix, k), info, k, want[k].Size)
			wantAgree(t, fmt.Sprintf("ListBlobs(%q) of %q", prefix, k), info, want[k])
		}
	}
}

// testBlobList creates blobs inside a prefix, at several depths, and
// beside it, sharing its first bytes, and one it deletes: ListBlobs lists
// each blob inside exactly once with the size and the time StatBlob gives,
// none outside, and not the deleted one. An error from fn stops the
// listing and is returned; a context cancelled before the listing, or by
// fn during it, stops it with the context's error.
func testBlobList(t *testing.T, sc *scope) {
	bs := blobStore(t, sc)
	base := sc.prefix + "blobs/"
	inside := []string{base + "a", base + "b/c", base + "b/d/e", base + "z"}
	outside := []string{sc.prefix + "blobsx", sc.prefix + "blobs-other/a", sc.prefix + "blob", sc.prefix + "bloBs/a"}
	stats := map[string]writefence.BlobInfo{}
	for i, k := range slices.Concat(inside, outside) {
		createBlob(t, bs, sc.blobKey(strings.TrimPrefix(k, sc.prefix)), blobBytes{uint64(30 + i), int64(1 + 10*i)})
		stats[k] = statBlob(t, bs, k)
	}
	gone := sc.blobKey("blobs/deleted")
	createBlob(t, bs, gone, blobBytes{39, 5})
	if err := bs.DeleteBlob(t.Context(), gone); err != nil {
		t.Fatalf("DeleteBlob(%q): %v", gone, err)
	}
	pick := func(ks []string) map[string]writefence.BlobInfo {
		m := map[string]writefence.BlobInfo{}
		for _, k := range ks {
			m[k] = stats[k]
		}
		return m
	}
	wantBlobsListed(t, bs, base, pick(inside), gone)
	wantBlobsListed(t, bs, sc.prefix+"blobs", pick(slices.Concat(inside, outside[:2])), gone)

	errStop := errors.New("writefencetest: stop listing")
	calls := 0
	err := bs.ListBlobs(t.Context(), base, func(writefence.BlobInfo) error { calls++; return errStop })
	if !errors.Is(err, errStop) {
		t.Errorf("ListBlobs(%q) with an fn that fails: %v; want fn's error", base, err)
	}
	if calls != 1 {
		t.Errorf("ListBlobs(%q) called an fn that failed %d times; want once, then stop", base, calls)
	}

	err = bs.ListBlobs(canceledContext(t), base, func(writefence.BlobInfo) error { return nil })
	wantCanceled(t, err, fmt.Sprintf("ListBlobs(%q)", base))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	calls = 0
	err = bs.ListBlobs(ctx, base, func(writefence.BlobInfo) error {
		if calls++; calls == 1 {
			cancel()
		}
		return nil
	})
	wantCanceled(t, err, fmt.Sprintf("ListBlobs(%q) cancelled by fn at the first of %d blobs (fn called %d times)", base, len(inside), calls))
}

// testBlobMissing checks StatBlob and OpenBlob of a key never created: a
// *writefence.StoreError naming the key that matches ErrNotFound and not
// ErrConflict; and that DeleteBlob of it returns nil, as Collect running
// in two processes at once needs.
func testBlobMissing(t *testing.T, sc *scope) {
	bs := blobStore(t, sc)
	key := sc.blobKey("missing")
	_, err := bs.StatBlob(t.Context(), key)
	wantBlobNotFound(t, err, fmt.Sprintf("StatBlob(%q) of a missing key", key), key)
	rc, _, err := bs.OpenBlob(t.Context(), key)
	if err == nil {
		rc.Close()
	}
	wantBlobNotFound(t, err, fmt.Sprintf("OpenBlob(%q) of a missing key", key), key)
	if err := bs.DeleteBlob(t.Context(), key); err != nil {
		t.Errorf("DeleteBlob(%q) of a missing key: %v; want nil", key, err)
	}
}

// wantBlobNotFound fails the test unless err, call's, is a
// *writefence.StoreError for key that matches ErrNotFound and not
// ErrConflict.
func wantBlobNotFound(t *testing.T, err error, call, key string) {
	t.Helper()
	wantStoreError(t, err, call, key, "writefence.ErrNotFound", writefence.ErrNotFound)
	if errors.Is(err, writefence.ErrConflict) {
		t.Errorf("%s: %v matches writefence.ErrConflict; a missing key is not a conflict", call, err)
	}
}

// testBlobDelete checks that a deleted blob is gone, for StatBlob and
// OpenBlob.
func testBlobDelete(t *testing.T, sc *scope) {
	bs := blobStore(t, sc)
	key := sc.blobKey("deleted")
	createBlob(t, bs, key, blobBytes{40, 100})
	if err := bs.DeleteBlob(t.Context(), key); err != nil {
		t.Fatalf("DeleteBlob(%q): %v", key, err)
	}
	wantNoBlob(t, bs, key, "after DeleteBlob")
}

// blobClockBlobs is how many blobs Blobs/Clock creates one after the
// other.
const blobClockBlobs = 4

// testBlobClock creates blobs one after the other and checks each one's
// time, as CreateBlob returns it, against the earlier ones', as StatBlob
// and ListBlobs give them: that is how Collect takes a blob's age, the
// time of a fresh blob it creates against the listed time of each blob.
// A later blob may not be older than an earlier one by more than
// blobClockSlack.
func testBlobClock(t *testing.T, sc *scope) {
	bs := blobStore(t, sc)
	base := sc.prefix + "clock/"
	var earlier []writefence.BlobInfo
	for i := range blobClockBlobs {
		key := sc.blobKey(fmt.Sprintf("clock/%d", i))
		fresh := createBlob(t, bs, key, blobBytes{uint64(50 + i), 0})
		listed := listedBlobs(t, bs, base)
		for _, e := range earlier {
			latest := e // of the accounts of e, StatBlob's and ListBlobs'
			for _, l := range listed[e.Key] {
				if l.Modified.After(latest.Modified) {
					latest = l
				}
			}
			if fresh.Modified.Before(latest.Modified.Add(-blobClockSlack)) {
				t.Errorf("CreateBlob(%q) returned Modified %s, %v before that of %q, created earlier (%s): the store's clock went back between blobs, so the ages Collect takes from it are wrong",
					key, stamp(fresh.Modified), latest.Modified.Sub(fresh.Modified), e.Key, stamp(latest.Modified))
			}
		}
		earlier = append(earlier, statBlob(t, bs, key))
	}
}

// testBlobFence writes a blob through a writefence.Fence on the store,
// with PutBlob, commits a manifest that references it, and reads it back
// through OpenBlob, checked against its reference; a blob the manifest
// does not reference is ErrNotFound through OpenBlob, though it exists.
// The writer's name holds a space, so the blob's key holds an escape
// ("%20"), as a Fence's keys may.
func testBlobFence(t *testing.T, sc *scope) {
	bs := blobStore(t, sc)
	const plugin, shard, writer = "writefencetest", "blobs", "writer one"
	f := &writefence.Fence{Store: sc.s, Prefix: sc.prefix + "fence/"}
	key, err := keys.Shard(f.Prefix, plugin, shard)
	if err != nil {
		t.Fatalf("keys.Shard: %v", err)
	}
	sc.track(key)
	ctx := t.Context()

	b := blobBytes{60, 100_003}
	ref, err := f.PutBlob(ctx, plugin, shard, writer, 1, b.reader())
	if err != nil {
		t.Fatalf("Fence.PutBlob of %d bytes: %v", b.size, err)
	}
	if ref.Size != b.size {
		t.Errorf("Fence.PutBlob of %d bytes returned a reference of %d", b.size, ref.Size)
	}
	err = f.Commit(ctx, plugin, shard, writer, 1, func(m writefence.Manifest) (writefence.Manifest, error) {
		m.Blobs = append(m.Blobs, ref)
		return m, nil
	})
	if err != nil {
		t.Fatalf("Fence.Commit of a manifest referencing %q: %v", ref.Name, err)
	}
	rc, got, err := f.OpenBlob(ctx, plugin, shard, ref.Name)
	if err != nil {
		t.Fatalf("Fence.OpenBlob(%q): %v", ref.Name, err)
	}
	if got != ref {
		t.Errorf("Fence.OpenBlob(%q) returned the reference %+v; want %+v, the one committed", ref.Name, got, ref)
	}
	diff, err := b.diff(rc)
	rc.Close()
	switch {
	case err != nil:
		t.Errorf("reading Fence.OpenBlob(%q): %v", ref.Name, err)
	case diff != "":
		t.Errorf("Fence.OpenBlob(%q): what it reads %s", ref.Name, diff)
	}

	loose, err := f.PutBlob(ctx, plugin, shard, writer, 1, blobBytes{61, 10}.reader())
	if err != nil {
		t.Fatalf("Fence.PutBlob: %v", err)
	}
	looseKey, err := keys.Blob(f.Prefix, plugin, shard, loose.Name)
	if err != nil {
		t.Fatalf("keys.Blob: %v", err)
	}
	if _, err := bs.StatBlob(ctx, looseKey); err != nil {
		t.Errorf("StatBlob(%q) of the blob Fence.PutBlob just wrote: %v", looseKey, err)
	}
	rc, _, err = f.OpenBlob(ctx, plugin, shard, loose.Name)
	if err == nil {
		rc.Close()
	}
	wantOnly(t, err, fmt.Sprintf("Fence.OpenBlob(%q) of a blob the manifest does not reference", loose.Name),
		"writefence.ErrNotFound", writefence.ErrNotFound)
}

// testRaceCreateBlob makes every goroutine create the same new blob key
// at once, each with bytes of its own and of its own length, 20 rounds;
// then one more create of the key, with bytes shorter than every racer's,
// follows the race. A store that refuses any of these creates with
// ErrConflict says it can tell that the key exists: exactly one racer
// must then land, the follow-up be refused, and the key hold the winner's
// bytes. A store that refuses none replaces the blob whole at every
// create (which the check logs): the key must hold exactly one racer's
// bytes after the race and the follow-up's after it. Never a mix.
func testRaceCreateBlob(t *testing.T, sc *scope) {
	bs := blobStore(t, sc)
	var total tally
	var refusing, replacing int
	for r := 1; r <= raceRounds; r++ {
		key := sc.blobKey(fmt.Sprintf("race-create-blob-%02d", r))
		racer := func(i int) blobBytes { return blobBytes{uint64(r)<<8 | uint64(i), int64(2000 + 131*i)} }
		errs := make([]error, raceWorkers)
		together(raceWorkers, nil, nil, func(i int) {
			_, errs[i] = bs.CreateBlob(t.Context(), key, racer(i).reader())
		})
		round := total.round(t, r, errs, writefence.ErrConflict)
		got := readBlob(t, bs, key)
		held := -1 // the racer whose bytes the key holds
		for i := range raceWorkers {
			if bytes.Equal(got, racer(i).bytes()) {
				held = i
			}
		}
		if held < 0 {
			t.Errorf("round %d: after %d racing creates %q holds %s, no racer's bytes whole", r, raceWorkers, key, describe(got))
		}

		follow := blobBytes{uint64(r)<<8 | 0xff, 500}
		_, ferr := bs.CreateBlob(t.Context(), key, follow.reader())
		switch {
		case round.losers > 0 || errors.Is(ferr, writefence.ErrConflict):
			refusing++
			if len(round.winners) != 1 {
				t.Errorf("round %d: %d of %d racing creates of %q landed, %d were refused with ErrConflict, and the create after the race %v: a store that refuses a create of an existing key must refuse all but one racing create too",
					r, len(round.winners), raceWorkers, key, round.losers, outcome(ferr))
			} else if w := round.winners[0]; held >= 0 && held != w {
				t.Errorf("round %d: %q holds goroutine %d's bytes; goroutine %d's create is the one that landed", r, key, held, w)
			}
			if ferr == nil {
				t.Errorf("round %d: the create of %q after the race landed, though the store refused racing creates of it with ErrConflict", r, key)
			} else if held >= 0 {
				wantHolds(t, bs, key, racer(held), fmt.Sprintf("goroutine %d's bytes: a refused create must leave the blob as it was", held))
			}
		case ferr == nil:
			replacing++
			wantHolds(t, bs, key, follow, "the bytes of the create after the race, which it says it wrote")
		default:
			t.Errorf("round %d: the create of %q after the race: %v; want an error matching writefence.ErrConflict, or nil", r, key, ferr)
		}
	}
	total.log(t, raceRounds, "creating one blob")
	t.Logf("%d rounds refused creates of an existing key, %d replaced it", refusing, replacing)
	if replacing > 0 {
		t.Log(blobsReplaced)
	}
}

// outcome describes how a call ended, for a failure message.
func outcome(err error) string {
	if err == nil {
		return "landed"
	}
	return "failed: " + err.Error()
}

// testBlobCanceled creates a blob under a cancelled context: CreateBlob
// fails with an error matching context.Canceled and leaves no blob.
func testBlobCanceled(t *testing.T, sc *scope) {
	bs := blobStore(t, sc)
	key := sc.blobKey("canceled")
	_, err := bs.CreateBlob(canceledContext(t), key, blobBytes{70, 10}.reader())
	wantCanceled(t, err, fmt.Sprintf("CreateBlob(%q)", key))
	wantNoBlob(t, bs, key, "after a CreateBlob under a cancelled context")
}

// blobCollectGrace is the grace of Blobs/Collect's collections that wait
// for a blob to age, by the store's clock.
const blobCollectGrace = 2 * time.Second

// blobCollectWait bounds how long Blobs/Collect waits for the store's
// clock to pass the grace.
const blobCollectWait = 30 * time.Second

// testBlobCollect runs the streams protocol's collection on the store: a
// deposed writer's blobs are collected at once once its successor sealed,
// whatever the grace; an unreferenced blob of the current tenure is kept
// while younger than the grace by the store's own clock and collected
// once older, which a bounded poll of that clock waits for; a referenced
// blob is never collected, until a commit replaces the references. Each
// poll reads the store's clock (a fresh blob's time) before and after its
// Collect, so a loaded machine only makes it wait longer.
func testBlobCollect(t *testing.T, sc *scope) {
	bs := blobStore(t, sc)
	const plugin, shard = "writefencetest", "collect"
	ctx := t.Context()
	f := &writefence.Fence{Store: sc.s, Prefix: sc.prefix + "collect/"}
	key, err := keys.Shard(f.Prefix, plugin, shard)
	if err != nil {
		t.Fatalf("keys.Shard: %v", err)
	}
	sc.track(key)
	seed := uint64(80)
	put := func(writer string, epoch uint64) writefence.BlobRef {
		t.Helper()
		seed++
		ref, err := f.PutBlob(ctx, plugin, shard, writer, epoch, blobBytes{seed, 1000}.reader())
		if err != nil {
			t.Fatalf("Fence.PutBlob by %s at %d: %v", writer, epoch, err)
		}
		return ref
	}
	collect := func(grace time.Duration) writefence.GCReport {
		t.Helper()
		report, err := f.Collect(ctx, plugin, shard, writefence.GCOptions{Grace: grace})
		if err != nil {
			t.Fatalf("Fence.Collect with a grace of %v: %v", grace, err)
		}
		return report
	}
	want := func(what string, got []writefence.BlobInfo, refs ...writefence.BlobRef) {
		t.Helper()
		var names, wantNames []string
		for _, b := range got {
			names = append(names, b.Key[strings.LastIndexByte(b.Key, '/')+1:])
		}
		for _, r := range refs {
			wantNames = append(wantNames, r.Name)
		}
		slices.Sort(names)
		slices.Sort(wantNames)
		if !slices.Equal(names, wantNames) {
			t.Errorf("Collect %s %v; want %v", what, names, wantNames)
		}
	}
	storeClock := func() time.Time {
		t.Helper()
		k := sc.blobKey(fmt.Sprintf("clock-%d", time.Now().UnixNano()))
		made := createBlob(t, bs, k, blobBytes{0, 0}).Modified
		if made.IsZero() {
			t.Fatalf("CreateBlob(%q) gave no creation time: Collect's grace is by the store's clock, which the kit reads there", k)
		}
		return made
	}

	a1 := put("a", 1)
	if err := f.Commit(ctx, plugin, shard, "a", 2, func(m writefence.Manifest) (writefence.Manifest, error) {
		m.Blobs = append(m.Blobs, a1)
		return m, nil
	}); err != nil {
		t.Fatalf("Fence.Commit of a's blob: %v", err)
	}
	a2 := put("a", 3) // never committed
	// b takes over: a is deposed, and a blob it puts afterwards is as dead
	// as the one before.
	if err := f.Seal(ctx, plugin, shard, "b", 10); err != nil {
		t.Fatalf("Fence.Seal by b at 10: %v", err)
	}
	a3 := put("a", 5)
	b1 := put("b", 10)

	report := collect(time.Hour)
	want("deleted", report.Deleted, a2, a3)
	want("found referenced", report.Referenced, a1)
	want("kept, within the grace,", report.Kept, b1)
	for _, r := range []writefence.BlobRef{a2, a3} {
		k, err := keys.Blob(f.Prefix, plugin, shard, r.Name)
		if err != nil {
			t.Fatalf("keys.Blob: %v", err)
		}
		wantNoBlob(t, bs, k, "after Collect deleted it")
	}

	b1key, err := keys.Blob(f.Prefix, plugin, shard, b1.Name)
	if err != nil {
		t.Fatalf("keys.Blob: %v", err)
	}
	b1made := statBlob(t, bs, b1key).Modified
	if b1made.IsZero() {
		t.Fatalf("StatBlob(%q) gave no creation time: Collect's grace is by the store's clock", b1key)
	}
	deadline := time.Now().Add(blobCollectWait)
	for polls := 0; ; polls++ {
		before := storeClock()
		report := collect(blobCollectGrace)
		after := storeClock()
		want("found referenced, however old,", report.Referenced, a1)
		if len(report.Deleted) > 0 {
			want("deleted", report.Deleted, b1)
			if age := after.Sub(b1made); age < blobCollectGrace-blobClockSlack {
				t.Errorf("Collect deleted %q %v after it was made, by the store's clock; want at least the grace, %v", b1.Name, age, blobCollectGrace)
			}
			t.Logf("the blob was collected after %d polls of the store's clock", polls)
			break
		}
		want("kept", report.Kept, b1)
		if age := before.Sub(b1made); age >= blobCollectGrace+blobClockSlack {
			t.Fatalf("Collect kept %q %v after it was made, by the store's clock; want it deleted once older than the grace, %v", b1.Name, age, blobCollectGrace)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the store's clock did not pass a grace of %v in %v", blobCollectGrace, blobCollectWait)
		}
		poll := time.NewTimer(100 * time.Millisecond)
		select {
		case <-ctx.Done():
			poll.Stop()
			t.Fatal(ctx.Err())
		case <-poll.C:
		}
	}

	// b's commit replaces the references: a1 can never be committed
	// again (a's tenure is over), and goes at once.
	b2 := put("b", 11)
	if err := f.Commit(ctx, plugin, shard, "b", 11, func(writefence.Manifest) (writefence.Manifest, error) {
		return writefence.Manifest{Payload: []byte("b's state"), Blobs: []writefence.BlobRef{b2}}, nil
	}); err != nil {
		t.Fatalf("Fence.Commit of b's blob: %v", err)
	}
	report = collect(time.Hour)
	want("deleted", report.Deleted, a1)
	want("found referenced", report.Referenced, b2)
	want("kept", report.Kept)
}
