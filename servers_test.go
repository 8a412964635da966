package writefence_test

import (
	"context"
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
	"github.com/writefence/writefence/internal/testserver"
	"github.com/writefence/writefence/writefencetest"
)

// kitReadLimit is the read limit the adapters' conformance runs set on
// their stores, so the suite checks ErrTooLarge without writing 64 MiB.
const kitReadLimit = 2 << 20

// kitOptions are the conformance suite's options for a store whose bytes
// damage reaches from outside it and whose read limit is kitReadLimit,
// with Get/UnderOverwrite sized as testserver.KitOverwriteReads says.
func kitOptions(damage testserver.Damager) *writefencetest.Options {
	return &writefencetest.Options{
		Damage: func(ctx context.Context, key string, f writefencetest.Fault) error {
			return damage(ctx, key, testserver.Fault(f))
		},
		ReadLimit:      kitReadLimit,
		OverwriteReads: testserver.KitOverwriteReads(),
	}
}

// What the adapters' tests on their servers share beside the kit: blobs of
// a pattern, the memory a blob's stream takes, and the check of a read
// limit's error.

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
func testBlobMemory(t *testing.T, store writefence.BlobStore, bound uint64) {
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

// blobNames returns the names, in the shard's blob space, of infos.
func blobNames(infos []writefence.BlobInfo) []string {
	var names []string
	for _, b := range infos {
		names = append(names, b.Key[strings.LastIndexByte(b.Key, '/')+1:])
	}
	slices.Sort(names)
	return names
}

// sortedNames returns the names of refs, sorted.
func sortedNames(refs ...writefence.BlobRef) []string {
	var names []string
	for _, r := range refs {
		names = append(names, r.Name)
	}
	slices.Sort(names)
	return names
}

// benchPayload returns n bytes of a pattern.
func benchPayload(n int) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(i*31 + 7)
	}
	return p
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
