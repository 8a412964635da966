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
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/defaults"
	"github.com/writefence/writefence/internal/keys"
	"github.com/writefence/writefence/internal/pushrace"
	"github.com/writefence/writefence/internal/testserver"
)

// The checks every adapter that holds blobs runs on its server, and the
// helpers they share, whichever adapters are built.

// storeContents returns every key under prefix with its version and
// bytes, read through store, which must be a Lister.
func storeContents(t *testing.T, store writefence.ConditionalStore, prefix string) map[string]string {
	t.Helper()
	ctx := t.Context()
	contents := map[string]string{}
	require.NoError(t, store.(writefence.Lister).List(ctx, prefix, func(key string) error {
		data, version, err := store.Get(ctx, key)
		if err != nil {
			return err
		}
		contents[key] = version + " " + string(data)
		return nil
	}))
	return contents
}

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
	// Above the first MiB, which the S3 and GCS stores read before they
	// choose between one request and an upload in parts, by two parts.
	large := 1<<20 + 2*part + 12345
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
// is the resolution of the store's times.
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

// testProtocol walks store through the answers an adapter classifies, on
// key "k" of a bucket of the test's own: a read of a missing key, an update
// of it with madeUp (a well-formed token no write returned), a create, a
// second create, an update and a stale one, and deletes. extra runs after
// the writes with the versions of the two that landed and the error of the
// second create; any write it makes must be refused, because the walk then
// checks that the key holds the update.
func testProtocol(t *testing.T, store interface {
	writefence.ConditionalStore
	writefence.Deleter
}, madeUp string, extra func(v1, v2 string, createErr error)) {
	ctx := t.Context()
	_, _, err := store.Get(ctx, "k")
	require.ErrorIs(t, err, writefence.ErrNotFound)

	_, err = store.PutIfVersion(ctx, "k", []byte("one"), madeUp)
	require.ErrorIs(t, err, writefence.ErrConflict, "an update of a missing key")
	_, _, err = store.Get(ctx, "k")
	require.ErrorIs(t, err, writefence.ErrNotFound, "an update of a missing key must not create it")

	v1, err := store.PutIfVersion(ctx, "k", []byte("one"), "")
	require.NoError(t, err)
	data, v, err := store.Get(ctx, "k")
	require.NoError(t, err)
	assert.Equal(t, "one", string(data))
	assert.Equal(t, v1, v)

	_, createErr := store.PutIfVersion(ctx, "k", []byte("other"), "")
	require.ErrorIs(t, createErr, writefence.ErrConflict, "create-only on an existing key")

	v2, err := store.PutIfVersion(ctx, "k", []byte("two"), v1)
	require.NoError(t, err)
	assert.NotEqual(t, v1, v2)
	_, err = store.PutIfVersion(ctx, "k", []byte("three"), v1)
	require.ErrorIs(t, err, writefence.ErrConflict, "stale update")

	extra(v1, v2, createErr)
	data, v, err = store.Get(ctx, "k")
	require.NoError(t, err)
	assert.Equal(t, "two", string(data), "no refused write landed")
	assert.Equal(t, v2, v)

	require.NoError(t, store.Delete(ctx, "k"))
	require.NoError(t, store.Delete(ctx, "k"), "deleting a missing key is not an error")
	_, _, err = store.Get(ctx, "k")
	require.ErrorIs(t, err, writefence.ErrNotFound)
}

// testFenceRace races 16 writers, each with a Fence of its own, over 50
// rounds at one epoch a round (writefencetest.RacePush: every writer has
// read the record before any of them writes): in every round exactly one
// push lands, every other is refused as stale, and the record is the
// winner's.
func testFenceRace(t *testing.T, store writefence.ConditionalStore) {
	const writers, rounds = 16, 50
	results, err := pushrace.Run(t.Context(), store, pushrace.Race{
		Writers: writers, Rounds: rounds,
		Prefix: testserver.UniqueName(t) + "/", Plugin: "race", Shard: "shard",
	})
	require.NoError(t, err)
	require.Len(t, results, rounds)
	stale := 0
	for _, r := range results {
		assert.Empty(t, r.Errors, "round %d", r.Round)
		assert.Empty(t, r.Violations, "round %d", r.Round)
		assert.Len(t, r.Winners, 1, "round %d: winners", r.Round)
		stale += r.Stale
	}
	t.Logf("%d rounds of %d writers: %d pushes refused as stale", rounds, writers, stale)
	assert.Equal(t, rounds*(writers-1), stale)
}

// prefixStoreUnderTest is an adapter with the prefix capability.
type prefixStoreUnderTest interface {
	writefence.ConditionalStore
	writefence.PrefixReader
}

// testPrefixAgreesWithGet checks GetPrefix against a full Get of the same
// object on a real server: the prefix is the start of the bytes, the size
// is their length and the version is Get's version, for objects shorter
// than, as long as and longer than n, including the empty object. The S3
// and GCS prefix tests share it.
func testPrefixAgreesWithGet(t *testing.T, store prefixStoreUnderTest) {
	ctx := t.Context()
	base := testserver.UniqueName(t)
	put := func(t *testing.T, key string, data []byte, expect string) (string, error) {
		cleanupKey(t, store, key)
		return store.PutIfVersion(ctx, key, data, expect)
	}
	for _, n := range []int64{1, defaults.MaxHeaderSize} {
		seen := map[int64]bool{}
		for _, size := range []int64{0, 1, n - 1, n, n + 1, 3*n + 7} {
			if seen[size] {
				continue
			}
			seen[size] = true
			t.Run(fmt.Sprintf("n=%d/size=%d", n, size), func(t *testing.T) {
				key := fmt.Sprintf("%s/%d/%d", base, n, size)
				data := make([]byte, size)
				for i := range data {
					data[i] = byte(i*7 + 1)
				}
				written, err := put(t, key, data, "")
				require.NoError(t, err)

				prefix, gotSize, version, err := store.GetPrefix(ctx, key, n)
				require.NoError(t, err)
				full, fullVersion, err := store.Get(ctx, key)
				require.NoError(t, err)

				assert.Equal(t, data, full)
				assert.Equal(t, full[:min(n, size)], prefix)
				assert.Len(t, prefix, int(min(n, size)))
				assert.Equal(t, size, gotSize, "the object's size, not the range's")
				assert.Equal(t, fullVersion, version)
				assert.Equal(t, written, version)
			})
		}
	}

	t.Run("version follows a rewrite", func(t *testing.T) {
		key := base + "/rewrite"
		v1, err := put(t, key, []byte("first contents"), "")
		require.NoError(t, err)
		v2, err := store.PutIfVersion(ctx, key, []byte{}, v1)
		require.NoError(t, err)
		prefix, size, v, err := store.GetPrefix(ctx, key, 4)
		require.NoError(t, err)
		assert.Empty(t, prefix)
		assert.Zero(t, size)
		assert.Equal(t, v2, v)
		// The token it returned conditions a write like Get's does.
		_, err = store.PutIfVersion(ctx, key, []byte("third"), v)
		require.NoError(t, err)
		_, err = store.PutIfVersion(ctx, key, []byte("fourth"), v)
		require.ErrorIs(t, err, writefence.ErrConflict)
	})

	t.Run("missing key", func(t *testing.T) {
		_, _, _, err := store.GetPrefix(ctx, base+"/missing", defaults.MaxHeaderSize)
		require.ErrorIs(t, err, writefence.ErrNotFound)
		assert.NotErrorIs(t, err, writefence.ErrConflict)
	})

	t.Run("n below one", func(t *testing.T) {
		_, _, _, err := store.GetPrefix(ctx, base+"/missing", 0)
		require.ErrorIs(t, err, writefence.ErrInvalidArgument)
	})
}

// cleanupKey deletes key when the test ends, on a store that can delete.
func cleanupKey(t *testing.T, store writefence.ConditionalStore, key string) {
	if d, ok := store.(writefence.Deleter); ok {
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			assert.NoError(t, d.Delete(ctx, key))
		})
	}
}

// testPrefixFence: over a record holding a 16 MiB payload, a fresh fence
// reads the header alone (at most MaxHeaderSize bytes) and writes, in two
// requests; a stale push is refused after one such read; the fence that
// wrote last pushes again with the write alone. wire counts the store's
// traffic: it returns the round trips made and the bytes that reads
// returned so far. A write takes writeTrips round trips; every read or write
// may read up to slack bytes besides the record's (Valkey's version token).
func testPrefixFence(t *testing.T, store writefence.ConditionalStore, traffic func() (trips, read int64), writeTrips, slack int64) {
	ctx := t.Context()
	prefix := testserver.UniqueName(t) + "/"
	key, err := keys.Shard(prefix, "wal", "0")
	require.NoError(t, err)
	cleanupKey(t, store, key)
	big := benchPayload(16 << 20)
	fresh := func() *writefence.Fence { return &writefence.Fence{Store: store, Prefix: prefix} }
	require.NoError(t, fresh().Push(ctx, "wal", "0", "a", 1, big))

	// measure returns the round trips and the bytes read by f.
	measure := func(f func()) (int64, int64) {
		trips0, read0 := traffic()
		f()
		trips, read := traffic()
		return trips - trips0, read - read0
	}
	last := fresh()
	reqs, read := measure(func() { require.NoError(t, last.Push(ctx, "wal", "0", "b", 2, big)) })
	assert.Equal(t, 2+writeTrips, reqs, "cold push: a header read, the whole record it replaces, one write")
	assert.GreaterOrEqual(t, read, int64(len(big)), "the record replaced is read whole")
	assert.LessOrEqual(t, read, int64(len(big))+2*defaults.MaxHeaderSize+2*slack)

	reqs, read = measure(func() {
		require.ErrorIs(t, fresh().Push(ctx, "wal", "0", "c", 2, big), writefence.ErrStaleEpoch)
	})
	assert.Equal(t, int64(1), reqs, "stale push: the header read alone")
	assert.LessOrEqual(t, read, defaults.MaxHeaderSize+slack)

	reqs, read = measure(func() { require.NoError(t, last.Push(ctx, "wal", "0", "b", 3, big)) })
	assert.Equal(t, writeTrips, reqs, "steady push: the write alone")
	assert.LessOrEqual(t, read, slack)

	epoch, writer, payload, err := fresh().Latest(ctx, "wal", "0")
	require.NoError(t, err)
	assert.Equal(t, uint64(3), epoch)
	assert.Equal(t, "b", writer)
	assert.Equal(t, big, payload)
}

// testPrefixTooLarge: GetPrefix of an object over the store's read limit
// is refused with ErrTooLarge, as Get would be. setLimit sets the limit of
// store.
func testPrefixTooLarge(t *testing.T, store prefixStoreUnderTest, setLimit func(int64)) {
	t.Run("too large", func(t *testing.T) {
		key := testserver.UniqueName(t)
		_, err := store.PutIfVersion(t.Context(), key, make([]byte, 100), "")
		require.NoError(t, err)
		setLimit(99)
		defer setLimit(0)
		_, _, _, err = store.GetPrefix(t.Context(), key, 10)
		requireTooLarge(t, err, key, 99)
	})
}

// requireTooLarge checks that err refuses a read of key, an object over
// limit bytes: it matches ErrTooLarge and is a *StoreError that names key
// and limit.
func requireTooLarge(t *testing.T, err error, key string, limit int64) {
	t.Helper()
	require.ErrorIs(t, err, writefence.ErrTooLarge)
	var se *writefence.StoreError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, key, se.Key)
	assert.ErrorContains(t, err, fmt.Sprintf("object too large: more than %d bytes", limit))
}

// rawAccess reaches a store's objects without its adapter, as an
// operator's tool or a bug would: to damage a record in place and to see
// what the store holds.
type rawAccess struct {
	// read returns the object at key as the server holds it, and whether
	// it exists.
	read func(t *testing.T, key string) (string, bool)
	// flipLast flips the lowest bit of the object's last byte.
	flipLast func(t *testing.T, key string)
	// empty replaces the object with no bytes at all.
	empty func(t *testing.T, key string)
}

// testSettleAboveDamage: a record at epoch 100 whose last payload byte is
// damaged still shows its header, so its epoch: Inspect reports ErrCorrupt
// with epoch 100; a settle at 5 is refused as stale, writing nothing (not
// even its settle log entry); a deposed writer at 50 is refused; a settle
// at 101 lands, and then the writer at 50 is stale.
func testSettleAboveDamage(t *testing.T, store writefence.ConditionalStore, raw rawAccess) {
	ctx := t.Context()
	prefix := testserver.UniqueName(t) + "/"
	key, err := keys.Shard(prefix, "wal", "0")
	require.NoError(t, err)
	logKey, err := keys.SettleLog(prefix, "wal", "0")
	require.NoError(t, err)
	cleanupKey(t, store, key)
	cleanupKey(t, store, logKey)
	f := &writefence.Fence{Store: store, Prefix: prefix}
	require.NoError(t, f.Push(ctx, "wal", "0", "w100", 100, []byte("payload at epoch 100")))
	raw.flipLast(t, key)
	damaged, _ := raw.read(t, key)

	info, err := f.Inspect(ctx, "wal", "0")
	require.ErrorIs(t, err, writefence.ErrCorrupt)
	assert.Equal(t, uint64(100), info.Epoch, "the header still decodes: %v", err)
	assert.Equal(t, "w100", info.Writer)
	require.NotEmpty(t, info.Version)

	unchanged := func(what string) {
		t.Helper()
		now, _ := raw.read(t, key)
		assert.Equal(t, damaged, now, "%s: the damage stands", what)
		_, _, err := store.Get(ctx, logKey)
		assert.ErrorIs(t, err, writefence.ErrNotFound, "%s: no settle was entered", what)
	}
	err = f.Settle(ctx, "wal", "0", writefence.Settlement{Version: info.Version, Writer: "op", Epoch: 5, Payload: []byte("restored at 5")})
	var se *writefence.StaleEpochError
	require.ErrorAs(t, err, &se, "a settle below the damaged record's epoch: %v", err)
	assert.Equal(t, uint64(100), se.RecordedEpoch)
	unchanged("settle at 5")
	err = (&writefence.Fence{Store: store, Prefix: prefix}).Push(ctx, "wal", "0", "w50", 50, []byte("deposed"))
	require.ErrorIs(t, err, writefence.ErrCorrupt, "a deposed writer meets the damage")
	unchanged("push at 50")

	require.NoError(t, f.Settle(ctx, "wal", "0", writefence.Settlement{Version: info.Version, Writer: "op", Epoch: 101, Payload: []byte("restored at 101")}))
	epoch, writer, payload, err := f.Latest(ctx, "wal", "0")
	require.NoError(t, err)
	assert.Equal(t, [3]string{"101", "op", "restored at 101"}, [3]string{strconv.FormatUint(epoch, 10), writer, string(payload)})
	err = (&writefence.Fence{Store: store, Prefix: prefix}).Push(ctx, "wal", "0", "w50", 50, []byte("deposed"))
	require.ErrorAs(t, err, &se, "the deposed writer after the settle")
	assert.Equal(t, uint64(101), se.RecordedEpoch)
}

// testSettleRepeatDamage: damage that repeats has the same version on a
// store whose version is the content's (an S3 ETag, a Valkey damaged
// version): push 5, empty the record, settle at 10 with floor 5, push 20,
// empty it again. Running the same settle again would lower the epoch from
// 20 to 10; the settle log refuses it as stale and the damage stands.
func testSettleRepeatDamage(t *testing.T, store writefence.ConditionalStore, raw rawAccess) {
	ctx := t.Context()
	prefix := testserver.UniqueName(t) + "/"
	key, err := keys.Shard(prefix, "wal", "0")
	require.NoError(t, err)
	logKey, err := keys.SettleLog(prefix, "wal", "0")
	require.NoError(t, err)
	cleanupKey(t, store, key)
	cleanupKey(t, store, logKey)
	f := &writefence.Fence{Store: store, Prefix: prefix}
	inspectDamage := func() string {
		t.Helper()
		info, err := f.Inspect(ctx, "wal", "0")
		require.ErrorIs(t, err, writefence.ErrCorrupt)
		assert.Zero(t, info.Epoch, "nothing of the record is left to decode")
		require.NotEmpty(t, info.Version)
		return info.Version
	}

	require.NoError(t, f.Push(ctx, "wal", "0", "w", 5, []byte("five")))
	raw.empty(t, key)
	settle := writefence.Settlement{Version: inspectDamage(), Writer: "op", Epoch: 10, Payload: []byte("restored"), Floor: 5}
	require.NoError(t, f.Settle(ctx, "wal", "0", settle))
	require.NoError(t, f.Push(ctx, "wal", "0", "w", 20, []byte("twenty")))
	raw.empty(t, key)
	require.Equal(t, settle.Version, inspectDamage(), "the same damage has the same version")

	err = f.Settle(ctx, "wal", "0", settle)
	var se *writefence.StaleEpochError
	require.ErrorAs(t, err, &se, "the old settle over new damage: %v", err)
	assert.Equal(t, uint64(10), se.RecordedEpoch, "the settle log names the settle already made")
	now, exists := raw.read(t, key)
	assert.True(t, exists)
	assert.Empty(t, now, "the damage stands")
	inspectDamage()
}

// wrapperCalls is what a wrapper that embeds an adapter does in its
// overrides of Get and PutIfVersion: it counts every call and, when told
// to, refuses it with errWrapperRefused instead of calling the adapter.
// Embedding needs a concrete type, so each adapter's tests declare their
// wrapper type and forward its two overrides here.
type wrapperCalls struct {
	refuseGets, refusePuts atomic.Bool
	gets, puts             atomic.Int64
}

// errWrapperRefused is the wrapper's refusal: transient, so the Fence
// retries it as it would a store's failure, through the wrapper again.
var errWrapperRefused = errors.New("refused by the test's wrapper")

func (w *wrapperCalls) get(ctx context.Context, key string, next func(context.Context, string) ([]byte, string, error)) ([]byte, string, error) {
	w.gets.Add(1)
	if w.refuseGets.Load() {
		return nil, "", errWrapperRefused
	}
	return next(ctx, key)
}

func (w *wrapperCalls) put(ctx context.Context, key string, data []byte, expect string,
	next func(context.Context, string, []byte, string) (string, error)) (string, error) {
	w.puts.Add(1)
	if w.refusePuts.Load() {
		return "", errWrapperRefused
	}
	return next(ctx, key, data, expect)
}

// testWrapperNotBypassed checks that a store embedding an adapter and
// overriding Get or PutIfVersion is used through its overrides, never
// through the capabilities it inherits (GetPrefix, PutPartsIfVersion,
// PutIfBranded), by every write of a Fence (Push, Update, Seal, Settle,
// Lease.Acquire, ClaimBrand) and every read, with no brand check and with
// BrandVerifyAlways. wrapped is such a wrapper over adapter, its overrides
// forwarded to calls; the test's keys are under prefix.
//
// With its PutIfVersion refusing, every write attempt the engine makes
// (counted by testserver.Trace, MaxAttempts of them) reaches the override
// and the operation fails with the wrapper's error; with its Get
// refusing, every read does, and nothing is written. Either way the store
// is unchanged.
func testWrapperNotBypassed(t *testing.T, adapter, wrapped writefence.ConditionalStore, calls *wrapperCalls, prefix string) {
	const maxAttempts = 3
	for _, brand := range []writefence.BrandMode{0, writefence.BrandVerifyAlways} {
		t.Run(map[writefence.BrandMode]string{0: "no brand", writefence.BrandVerifyAlways: "brand verified in every write"}[brand], func(t *testing.T) {
			ctx := t.Context()
			prefix := prefix + strconv.Itoa(int(brand)) + "/"
			direct := &writefence.Fence{Store: adapter, Prefix: prefix}
			require.NoError(t, direct.Push(ctx, "wal", "0", "w", 3, []byte("recorded at 3")))
			damagedKey, err := keys.Shard(prefix, "wal", "damaged")
			require.NoError(t, err)
			_, err = adapter.PutIfVersion(ctx, damagedKey, []byte("no record"), "")
			require.NoError(t, err)
			info, err := direct.Inspect(ctx, "wal", "damaged")
			require.ErrorIs(t, err, writefence.ErrCorrupt)
			if brand != 0 {
				_, err := direct.ClaimBrand(ctx)
				require.NoError(t, err)
			}
			before := storeContents(t, adapter, prefix)

			f := &writefence.Fence{Store: wrapped, Prefix: prefix, Brand: brand, MaxAttempts: maxAttempts}
			type op struct {
				name  string
				write bool
				run   func(ctx context.Context) error
			}
			ops := []op{
				{"push", true, func(ctx context.Context) error { return f.Push(ctx, "wal", "0", "w", 7, []byte("pushed")) }},
				{"update", true, func(ctx context.Context) error {
					return f.Update(ctx, "wal", "0", "w", 7, func(cur []byte) ([]byte, error) { return append(cur, '+'), nil })
				}},
				{"seal", true, func(ctx context.Context) error { return f.Seal(ctx, "wal", "0", "w", 7) }},
				{"settle", true, func(ctx context.Context) error {
					return f.Settle(ctx, "wal", "damaged", writefence.Settlement{Version: info.Version, Writer: "op", Epoch: 9, Payload: []byte("settled"), Floor: 1})
				}},
				{"lease acquire", true, func(ctx context.Context) error {
					_, err := (&writefence.Lease{Fence: f, Name: "lease", Holder: "h", TTL: time.Minute}).Acquire(ctx)
					return err
				}},
				{"latest", false, func(ctx context.Context) error { _, _, _, err := f.Latest(ctx, "wal", "0"); return err }},
				{"inspect", false, func(ctx context.Context) error { _, err := f.Inspect(ctx, "wal", "0"); return err }},
			}
			if brand == 0 {
				// Under a brand the store is claimed already: nothing to write.
				ops = append(ops, op{"claim brand", true, func(ctx context.Context) error { _, err := f.ClaimBrand(ctx); return err }})
			}
			for _, mode := range []string{"put refused", "get refused"} {
				for _, o := range ops {
					if mode == "put refused" && !o.write {
						continue
					}
					t.Run(mode+"/"+o.name, func(t *testing.T) {
						calls.refusePuts.Store(mode == "put refused")
						calls.refuseGets.Store(mode == "get refused")
						defer calls.refusePuts.Store(false)
						defer calls.refuseGets.Store(false)
						gets0, puts0 := calls.gets.Load(), calls.puts.Load()
						tctx, trace := testserver.Traced(ctx)
						err := o.run(tctx)
						gets, puts := calls.gets.Load()-gets0, calls.puts.Load()-puts0
						t.Logf("%d reads, %d writes by the engine; %d gets, %d puts by the wrapper: %v", trace.Reads(), trace.Writes(), gets, puts, err)
						require.ErrorIs(t, err, errWrapperRefused, "the override was used")
						if mode == "put refused" {
							assert.Equal(t, int64(maxAttempts), trace.Writes(), "every attempt wrote")
							assert.Equal(t, trace.Writes(), puts, "every write went through the override")
							// Under BrandVerifyAlways the brand read before
							// each write is one of the engine's reads too.
							wantReads := int64(maxAttempts) // a settle reads its log too
							if brand == writefence.BrandVerifyAlways {
								wantReads = 2 * maxAttempts
							}
							assert.GreaterOrEqual(t, trace.Reads(), wantReads, "every attempt read")
							assert.Equal(t, trace.Reads(), gets, "every read went through Get")
						} else {
							// A write retries its read; Latest and Inspect
							// read once, and under a brand read the brand
							// first (not an engine read), which is refused.
							reads, brandReads := int64(maxAttempts), int64(0)
							switch {
							case !o.write && brand != 0:
								reads, brandReads = 0, 1
							case !o.write:
								reads = 1
							}
							assert.Equal(t, reads, trace.Reads(), "every attempt read")
							assert.Equal(t, trace.Reads()+brandReads, gets, "every read went through the override")
							assert.Zero(t, trace.Writes(), "nothing was written")
							assert.Zero(t, puts)
						}
						assert.Equal(t, before, storeContents(t, adapter, prefix), "the store is unchanged")
					})
				}
			}
		})
	}
}
