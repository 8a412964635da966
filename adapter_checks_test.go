package writefence_test

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"runtime"
	"runtime/metrics"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/keys"
	"github.com/writefence/writefence/internal/testserver"
)

// The checks every adapter that holds blobs runs on its server, and the
// helpers they share, whichever adapters are built.

// blobStoreUnderTest is an adapter that holds blobs.
type blobStoreUnderTest interface {
	writefence.ConditionalStore
	writefence.BlobStore
}

// patternReader yields n bytes of a pattern of its seed, copied as they
// are read from one table the package holds: a blob of any size costs the
// test no memory, and little time.
type patternReader struct {
	n, off int64
	seed   byte
}

// patternPeriod is the period of the pattern, a prime, so that no part
// size repeats it.
const patternPeriod = 65521

// patternTable holds two periods, so that a read of up to one period
// from any offset is one copy.
var patternTable = func() []byte {
	t := make([]byte, 2*patternPeriod)
	for i := range t {
		o := i % patternPeriod
		t[i] = byte(o*31 + o>>7)
	}
	return t
}()

func newPattern(n int64, seed byte) *patternReader { return &patternReader{n: n, seed: seed} }

func (r *patternReader) Read(p []byte) (int, error) {
	if r.off >= r.n {
		return 0, io.EOF
	}
	total := 0
	for len(p) > 0 && r.off < r.n {
		start := (r.off + int64(r.seed)*977) % patternPeriod
		n := copy(p[:min(int64(len(p)), r.n-r.off)], patternTable[start:start+patternPeriod])
		p = p[n:]
		r.off += int64(n)
		total += n
	}
	return total, nil
}

// patternSum returns the CRC-32C of the pattern of n bytes of seed.
func patternSum(n int64, seed byte) uint32 {
	h := crc32.New(crc32.MakeTable(crc32.Castagnoli))
	_, _ = io.Copy(h, newPattern(n, seed))
	return h.Sum32()
}

// failingReader yields n bytes of a pattern, then err.
type failingReader struct {
	r   *patternReader
	err error
}

func (f *failingReader) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	if err == io.EOF {
		return n, f.err
	}
	return n, err
}

var errReaderBroke = errors.New("the test's reader broke")

// readBlobSum reads the blob at key through store to its end and returns
// its size and CRC-32C, and the info OpenBlob gave.
func readBlobSum(t *testing.T, store writefence.BlobStore, key string) (int64, uint32, writefence.BlobInfo) {
	t.Helper()
	rc, info, err := store.OpenBlob(t.Context(), key)
	require.NoError(t, err)
	defer rc.Close()
	h := crc32.New(crc32.MakeTable(crc32.Castagnoli))
	n, err := io.Copy(h, rc)
	require.NoError(t, err)
	return n, h.Sum32(), info
}

// requireBlobErr checks that err is a *StoreError of op on key that
// matches target.
func requireBlobErr(t *testing.T, err error, op, key string, target error) {
	t.Helper()
	require.ErrorIs(t, err, target)
	var se *writefence.StoreError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, op, se.Op)
	assert.Equal(t, key, se.Key)
}

// listBlobs returns what ListBlobs gives under prefix, by key, failing the
// test if a key comes twice.
func listBlobs(t *testing.T, store writefence.BlobStore, prefix string) map[string]writefence.BlobInfo {
	t.Helper()
	got := map[string]writefence.BlobInfo{}
	require.NoError(t, store.ListBlobs(t.Context(), prefix, func(b writefence.BlobInfo) error {
		_, dup := got[b.Key]
		assert.False(t, dup, "%s listed twice", b.Key)
		got[b.Key] = b
		return nil
	}))
	return got
}

// testBlobStore checks store's BlobStore against its contract, on keys of
// its own. kind is the store's name in its errors' Op ("s3", "gcs",
// "dir"); part is the store's part size (the round trip goes from 0
// bytes to several parts); res is the resolution of the times it
// reports, which may differ by that between its calls.
func testBlobStore(t *testing.T, store blobStoreUnderTest, kind string, part int64, res time.Duration) {
	base := testserver.UniqueName(t) + "/"
	// Above the first 5 MiB and the first MiB, which the S3 and GCS stores
	// read before they choose between one request and an upload in parts,
	// by two parts.
	large := 5<<20 + 2*part + 12345
	create := func(t *testing.T, key string, r io.Reader) writefence.BlobInfo {
		t.Helper()
		info, err := store.CreateBlob(t.Context(), key, r)
		require.NoError(t, err)
		assert.Equal(t, key, info.Key)
		return info
	}

	t.Run("round trip", func(t *testing.T) {
		for _, n := range []int64{0, 1, part - 1, part, 2*part + 12345, large} {
			key := fmt.Sprintf("%sround/%d", base, n)
			info := create(t, key, newPattern(n, 7))
			assert.Equal(t, n, info.Size)
			assert.False(t, info.Modified.IsZero())

			size, sum, opened := readBlobSum(t, store, key)
			assert.Equal(t, n, size)
			assert.Equal(t, patternSum(n, 7), sum, "%d bytes read back", n)
			assert.Equal(t, writefence.BlobInfo{Key: key, Size: n, Modified: opened.Modified}, opened)
			assert.WithinDuration(t, info.Modified, opened.Modified, res)

			stat, err := store.StatBlob(t.Context(), key)
			require.NoError(t, err)
			assert.Equal(t, writefence.BlobInfo{Key: key, Size: n, Modified: stat.Modified}, stat)
			assert.WithinDuration(t, info.Modified, stat.Modified, res)
		}
	})

	t.Run("create only", func(t *testing.T) {
		key := base + "once"
		first := create(t, key, strings.NewReader("first"))
		_, err := store.CreateBlob(t.Context(), key, strings.NewReader("second, longer"))
		requireBlobErr(t, err, kind+" blob create", key, writefence.ErrConflict)
		_, err = store.CreateBlob(t.Context(), key, newPattern(large, 3))
		requireBlobErr(t, err, kind+" blob create", key, writefence.ErrConflict)
		size, sum, _ := readBlobSum(t, store, key)
		assert.Equal(t, int64(5), size)
		assert.Equal(t, crc32.Checksum([]byte("first"), crc32.MakeTable(crc32.Castagnoli)), sum, "the refused writes changed nothing")
		stat, err := store.StatBlob(t.Context(), key)
		require.NoError(t, err)
		assert.WithinDuration(t, first.Modified, stat.Modified, res)
	})

	t.Run("failing reader", func(t *testing.T) {
		for _, n := range []int64{0, 10, part + 10, large} {
			key := fmt.Sprintf("%sbroken/%d", base, n)
			_, err := store.CreateBlob(t.Context(), key, &failingReader{r: newPattern(n, 1), err: errReaderBroke})
			requireBlobErr(t, err, kind+" blob create", key, errReaderBroke)
			_, err = store.StatBlob(t.Context(), key)
			require.ErrorIs(t, err, writefence.ErrNotFound, "a failed create leaves no blob")
		}
		assert.Empty(t, listBlobs(t, store, base+"broken/"))
	})

	t.Run("list", func(t *testing.T) {
		p := base + "list/"
		want := map[string]writefence.BlobInfo{}
		for i, k := range []string{"a", "b", "c/d", "c/e/f"} {
			want[p+k] = create(t, p+k, newPattern(int64(i*100), 2))
		}
		create(t, base+"listx", strings.NewReader("beside the prefix"))
		create(t, base+"lis/t", strings.NewReader("beside the prefix"))
		got := listBlobs(t, store, p)
		require.Len(t, got, len(want))
		for k, w := range want {
			require.Contains(t, got, k)
			assert.Equal(t, w.Size, got[k].Size, k)
			assert.WithinDuration(t, w.Modified, got[k].Modified, res, k)
		}

		errStop := errors.New("stop")
		calls := 0
		err := store.ListBlobs(t.Context(), p, func(writefence.BlobInfo) error { calls++; return errStop })
		require.ErrorIs(t, err, errStop, "fn's error stops the listing")
		assert.Equal(t, 1, calls)

		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		require.ErrorIs(t, store.ListBlobs(ctx, p, func(writefence.BlobInfo) error { return nil }), context.Canceled)
	})

	t.Run("missing", func(t *testing.T) {
		key := base + "never"
		_, err := store.StatBlob(t.Context(), key)
		requireBlobErr(t, err, kind+" blob stat", key, writefence.ErrNotFound)
		rc, _, err := store.OpenBlob(t.Context(), key)
		requireBlobErr(t, err, kind+" blob open", key, writefence.ErrNotFound)
		assert.Nil(t, rc)
	})

	t.Run("delete", func(t *testing.T) {
		key := base + "doomed"
		create(t, key, strings.NewReader("bytes"))
		require.NoError(t, store.DeleteBlob(t.Context(), key))
		_, err := store.StatBlob(t.Context(), key)
		require.ErrorIs(t, err, writefence.ErrNotFound)
		require.NoError(t, store.DeleteBlob(t.Context(), key), "a missing blob is not an error")
		assert.Empty(t, listBlobs(t, store, key))
	})

	t.Run("clock", func(t *testing.T) {
		// The store's clock: two fresh blobs, one after the other, are
		// given times in order (within the resolution) and seconds apart
		// at most; the server runs on this host, so its clock is near ours.
		before := time.Now()
		a := create(t, base+"clock/a", strings.NewReader(""))
		b := create(t, base+"clock/b", strings.NewReader(""))
		assert.False(t, b.Modified.Before(a.Modified.Add(-res)), "b was created after a")
		assert.WithinDuration(t, a.Modified, b.Modified, 5*time.Second)
		assert.WithinDuration(t, before, a.Modified, 5*time.Second)
	})

	t.Run("cancelled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		key := base + "cancelled"
		_, err := store.CreateBlob(ctx, key, strings.NewReader("x"))
		require.ErrorIs(t, err, context.Canceled)
		_, err = store.StatBlob(t.Context(), key)
		require.ErrorIs(t, err, writefence.ErrNotFound)
	})
}

// heapSample is what the heap holds: its objects, live or not yet swept
// (what a peak of memory is made of), and the objects the last GC found
// live (what is retained).
type heapSample struct{ objects, live uint64 }

// readHeap returns the heap's sample, without stopping the world.
func readHeap() heapSample {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return heapSample{objects: s[0].Value.Uint64(), live: s[1].Value.Uint64()}
}

// heapPeak samples the heap every millisecond until stop is called, which
// returns the largest of each figure sampled.
func heapPeak() (stop func() heapSample) {
	done := make(chan struct{})
	result := make(chan heapSample)
	go func() {
		var peak heapSample
		take := func() {
			h := readHeap()
			peak = heapSample{objects: max(peak.objects, h.objects), live: max(peak.live, h.live)}
		}
		take()
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				take()
				result <- peak
				return
			case <-tick.C:
				take()
			}
		}
	}()
	return func() heapSample {
		close(done)
		return <-result
	}
}

// growth returns how much each figure of peak exceeds base, in MiB.
func (peak heapSample) growth(base heapSample) (objects, live float64) {
	grew := func(p, b uint64) float64 { return float64(p-min(p, b)) / (1 << 20) }
	return grew(peak.objects, base.objects), grew(peak.live, base.live)
}

// testBlobMemory streams a 40 MiB blob through store's CreateBlob and
// checks that the bytes allocated meanwhile, by every goroutine (an upper
// bound on how much the heap can have grown), stay within bound. It logs
// them and the peak growth of the heap, sampled.
func testBlobMemory(t *testing.T, store blobStoreUnderTest, bound uint64) {
	const size = 40 << 20
	key := testserver.UniqueName(t) + "/big"
	// A first blob warms the client up (connections, caches), so what is
	// measured is the blob's own cost.
	_, err := store.CreateBlob(t.Context(), key+"-warm", strings.NewReader("warm"))
	require.NoError(t, err)
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	base := readHeap()
	stop := heapPeak()
	info, err := store.CreateBlob(t.Context(), key, newPattern(size, 9))
	objects, live := stop().growth(base)
	runtime.ReadMemStats(&after)
	require.NoError(t, err)
	assert.Equal(t, int64(size), info.Size)
	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("a %d MiB blob: %.1f MiB allocated (bound %.1f MiB); at their peaks the heap's objects grew by %.1f MiB, those live at a GC by %.1f MiB",
		size>>20, float64(allocated)/(1<<20), float64(bound)/(1<<20), objects, live)
	assert.LessOrEqual(t, allocated, bound, "bytes allocated while streaming the blob")

	n, sum, _ := readBlobSum(t, store, key)
	assert.Equal(t, int64(size), n)
	assert.Equal(t, patternSum(size, 9), sum)
}

// storeClock returns the blob store's time: the Modified it gives a fresh
// empty blob under prefix, outside every shard's blob space.
func storeClock(t *testing.T, store writefence.BlobStore, prefix string) time.Time {
	t.Helper()
	key := prefix + "_testclock/" + testserver.UniqueName(t)
	info, err := store.CreateBlob(t.Context(), key, strings.NewReader(""))
	require.NoError(t, err)
	require.NoError(t, store.DeleteBlob(t.Context(), key))
	return info.Modified
}

// blobNames returns the names, in the shard's blob space, of infos.
func blobNames(infos []writefence.BlobInfo) []string {
	var names []string
	for _, b := range infos {
		names = append(names, b.Key[strings.LastIndexByte(b.Key, '/')+1:])
	}
	slices.Sort(names)
	return names
}

// testBlobFence runs the streams protocol over store, on its server: blobs
// are put, committed and read back checked; a deposed writer's blobs are
// collected at once once its successor sealed, whatever the grace; an
// unreferenced blob of the current tenure is kept while younger than the
// grace by the store's own clock and collected once older, which a bounded
// poll of that clock waits for; a referenced blob is never collected. res
// is the resolution of the store's times. Each check of the grace reads
// the store's clock before and after its Collect, so a loaded machine only
// makes it wait longer: the callers run in parallel with other tests.
func testBlobFence(t *testing.T, store writefence.ConditionalStore, res time.Duration) {
	ctx := t.Context()
	prefix := testserver.UniqueName(t) + "/"
	f := &writefence.Fence{Store: store, Prefix: prefix}
	bs := store.(writefence.BlobStore)
	put := func(writer string, epoch uint64, n int64, seed byte) writefence.BlobRef {
		t.Helper()
		ref, err := f.PutBlob(ctx, "wal", "0", writer, epoch, newPattern(n, seed))
		require.NoError(t, err)
		assert.Equal(t, n, ref.Size)
		assert.Equal(t, patternSum(n, seed), ref.CRC)
		return ref
	}
	blobKey := func(ref writefence.BlobRef) string {
		k, err := keys.Blob(prefix, "wal", "0", ref.Name)
		require.NoError(t, err)
		return k
	}
	collect := func(grace time.Duration) writefence.GCReport {
		t.Helper()
		report, err := f.Collect(ctx, "wal", "0", writefence.GCOptions{Grace: grace})
		require.NoError(t, err)
		return report
	}

	a1 := put("a", 1, 3<<20+7, 1)
	require.NoError(t, f.Commit(ctx, "wal", "0", "a", 2, appendBlob(a1)))
	got, err := readBlob(t, f, a1.Name)
	require.NoError(t, err)
	assert.Equal(t, a1.CRC, crc32.Checksum([]byte(got), crc32.MakeTable(crc32.Castagnoli)), "read back, checked")

	a2 := put("a", 3, 100, 2)
	_, err = readBlob(t, f, a2.Name)
	require.ErrorIs(t, err, writefence.ErrNotFound, "an uncommitted blob is never visible")

	// b takes over: a is deposed, its commit refused, and a blob it
	// uploads afterwards is as dead as the one before.
	require.NoError(t, f.Seal(ctx, "wal", "0", "b", 10))
	require.ErrorIs(t, f.Commit(ctx, "wal", "0", "a", 3, appendBlob(a2)), writefence.ErrStaleEpoch)
	a3 := put("a", 5, 100, 4)
	b1 := put("b", 10, 100, 3)

	report := collect(time.Hour)
	assert.Equal(t, sortedNames(a2, a3), blobNames(report.Deleted), "a deposed writer's blobs go at once")
	assert.Equal(t, sortedNames(a1), blobNames(report.Referenced))
	assert.Equal(t, sortedNames(b1), blobNames(report.Kept), "within the grace")
	for _, r := range []writefence.BlobRef{a2, a3} {
		_, err := bs.StatBlob(ctx, blobKey(r))
		require.ErrorIs(t, err, writefence.ErrNotFound)
	}

	// The grace, by the store's clock: b1 is kept while it is younger
	// than grace at the time of a Collect, deleted once older.
	const grace = 2 * time.Second
	b1info, err := bs.StatBlob(ctx, blobKey(b1))
	require.NoError(t, err)
	deadline := time.Now().Add(30 * time.Second)
	for polls := 0; ; polls++ {
		before := storeClock(t, bs, prefix)
		report := collect(grace)
		after := storeClock(t, bs, prefix)
		assert.Equal(t, sortedNames(a1), blobNames(report.Referenced), "a referenced blob is never collected, however old")
		if len(report.Deleted) > 0 {
			assert.Equal(t, sortedNames(b1), blobNames(report.Deleted))
			assert.GreaterOrEqual(t, after.Sub(b1info.Modified), grace-res, "collected only once older than the grace")
			t.Logf("collected after %d polls of the store's clock", polls)
			break
		}
		assert.Equal(t, sortedNames(b1), blobNames(report.Kept))
		require.Less(t, before.Sub(b1info.Modified), grace+res, "kept although older than the grace")
		require.True(t, time.Now().Before(deadline), "the store's clock did not pass the grace in 30 s")
		poll := time.NewTimer(100 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-poll.C:
		}
	}
	got, err = readBlob(t, f, a1.Name)
	require.NoError(t, err)
	assert.Len(t, got, int(a1.Size))

	// b's first commit replaces the references: a1 can then never be
	// committed again (a's tenure is over), and goes at once.
	b2 := put("b", 11, 10, 5)
	require.NoError(t, f.Commit(ctx, "wal", "0", "b", 11, func(writefence.Manifest) (writefence.Manifest, error) {
		return writefence.Manifest{Payload: []byte("b's state"), Blobs: []writefence.BlobRef{b2}}, nil
	}))
	report = collect(time.Hour)
	assert.Equal(t, sortedNames(a1), blobNames(report.Deleted))
	assert.Equal(t, sortedNames(b2), blobNames(report.Referenced))
	assert.Empty(t, report.Kept)
	got, err = readBlob(t, f, b2.Name)
	require.NoError(t, err)
	assert.Len(t, got, 10)
}

func sortedNames(refs ...writefence.BlobRef) []string {
	var names []string
	for _, r := range refs {
		names = append(names, r.Name)
	}
	slices.Sort(names)
	return names
}
