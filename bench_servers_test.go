package writefence_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/minio/minio-go/v7"
	"github.com/redis/go-redis/v9"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/defaults"
	"github.com/writefence/writefence/internal/keys"
	"github.com/writefence/writefence/internal/testserver"
)

// The benchmarks below run over the real servers (skipped when their
// environment variables are unset) and are meant to be read side by side
// with benchstat; bench/run runs them and prints the comparisons. Sub-
// benchmark names carry size= and impl= so that benchstat can put the
// implementations in columns:
//
//	raw        the adapter's PutIfVersion of the payload, conditioned on the
//	           version the previous write returned: the floor.
//	fenced     Fence.Push by one writer pushing consecutive epochs (steady
//	           state: the fence conditions each write on the version it
//	           last wrote, without reading).
//	cold       Fence.Push by a fresh Fence every time: one read of the
//	           record's header (PrefixReader) and the write.
//	readfirst  the design that reads before every write: a fresh Fence
//	           every time over the store with PrefixReader hidden, so each
//	           push downloads the whole previous record before writing.
//
// roundtrips/op counts the HTTP requests sent, bytes-read/op the bytes of
// the GET response bodies received, both at the transport.

// benchSizes are the payload sizes of the benchmarks.
var benchSizes = []struct {
	name string
	n    int
}{{"1KiB", 1 << 10}, {"16MiB", 16 << 20}}

// benchImpls are the push implementations compared, the floor first.
var benchImpls = []string{"raw", "rawrecord", "fenced", "cold", "readfirst"}

// benchTransport counts a benchmark's HTTP traffic.
type benchTransport struct{ *testserver.Transport }

// traffic returns the requests sent and the GET body bytes read so far.
func (t *benchTransport) traffic() (reqs, read int64) { return t.Requests(), t.GetBytesRead() }

// hiddenPrefix hides every optional capability of the store it wraps, so a
// Fence over it reads whole records.
type hiddenPrefix struct{ writefence.ConditionalStore }

func benchPayload(n int) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(i*31 + 7)
	}
	return p
}

// benchPush runs every implementation at every size over store, whose HTTP
// traffic wire counts.
func benchPush(b *testing.B, store writefence.ConditionalStore, wire *benchTransport) {
	for _, size := range benchSizes {
		payload := benchPayload(size.n)
		for _, impl := range benchImpls {
			b.Run("size="+size.name+"/impl="+impl, func(b *testing.B) {
				benchPushImpl(b, store, wire, impl, payload)
			})
		}
	}
}

func benchPushImpl(b *testing.B, store writefence.ConditionalStore, wire *benchTransport, impl string, payload []byte) {
	ctx := context.Background()
	prefix := testserver.UniqueName(b) + "/"
	fence := &writefence.Fence{Store: store, Prefix: prefix}
	epoch := uint64(1)
	if err := fence.Push(ctx, "wal", "0", "w", epoch, payload); err != nil {
		b.Fatal(err)
	}
	rawKey := prefix + "raw"
	version, err := store.PutIfVersion(ctx, rawKey, payload, "")
	if err != nil {
		b.Fatal(err)
	}
	// rawrecord writes as many bytes as the fenced record holds (the
	// payload and a header), so that it and fenced differ only in the
	// fence's own work.
	record := append(append([]byte(nil), payload...), make([]byte, recordOverhead(b, store, prefix))...)

	b.SetBytes(int64(len(payload)))
	b.ReportAllocs()
	reqs, read := wire.traffic()
	for b.Loop() {
		epoch++
		switch impl {
		case "raw":
			version, err = store.PutIfVersion(ctx, rawKey, payload, version)
		case "rawrecord":
			version, err = store.PutIfVersion(ctx, rawKey, record, version)
		case "fenced":
			err = fence.Push(ctx, "wal", "0", "w", epoch, payload)
		case "cold":
			err = (&writefence.Fence{Store: store, Prefix: prefix}).Push(ctx, "wal", "0", "w", epoch, payload)
		case "readfirst":
			err = (&writefence.Fence{Store: hiddenPrefix{store}, Prefix: prefix}).Push(ctx, "wal", "0", "w", epoch, payload)
		default:
			b.Fatalf("unknown impl %q", impl)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	n := float64(b.N)
	reqsEnd, readEnd := wire.traffic()
	b.ReportMetric(float64(reqsEnd-reqs)/n, "roundtrips/op")
	b.ReportMetric(float64(readEnd-read)/n, "bytes-read/op")
}

// recordOverhead returns how many bytes a record under prefix holds beyond
// its payload: the size of the header of the record just pushed.
func recordOverhead(b *testing.B, store writefence.ConditionalStore, prefix string) int {
	data, _, err := store.Get(context.Background(), prefix+"s/wal/0")
	if err != nil {
		b.Fatal(err)
	}
	_, _, payload, err := (&writefence.Fence{Store: store, Prefix: prefix}).Latest(context.Background(), "wal", "0")
	if err != nil {
		b.Fatal(err)
	}
	return len(data) - len(payload)
}

// BenchmarkS3Push compares the implementations over MinIO.
func BenchmarkS3Push(b *testing.B) {
	store, wire := countedMinioStore(b)
	benchPush(b, store, wire)
}

// BenchmarkGCSPush compares the implementations over the GCS emulator.
func BenchmarkGCSPush(b *testing.B) {
	store, wire := countedGCSStore(b)
	benchPush(b, store, wire)
}

// countedMinioStore returns a store over a bucket of its own on the MinIO
// server, removed with its objects when the test or benchmark ends, and the
// transport that counts its traffic.
func countedMinioStore(b testing.TB) (*writefence.MinioConditionalStore, *benchTransport) {
	wire := &benchTransport{testserver.NewTransport(b)}
	c := testserver.S3Server(b).Client(b, wire)
	return writefence.NewMinioConditionalStore(c, testserver.MinioBucket(b, c)), wire
}

// countedGCSStore returns a store over a bucket of its own on the GCS
// emulator, removed with its objects when the test or benchmark ends, and
// the transport that counts its traffic.
func countedGCSStore(b testing.TB) (*writefence.GCSConditionalStore, *benchTransport) {
	wire := &benchTransport{testserver.NewTransport(b)}
	c := testserver.GCSClient(b, testserver.GCSEndpoint(b), wire)
	return writefence.NewGCSConditionalStore(c, testserver.GCSBucket(b, c)), wire
}

// benchTrips is a go-redis hook counting round trips, one per command or
// pipeline sent (the client has retries off).
type benchTrips struct{ n atomic.Int64 }

func (h *benchTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *benchTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}

func (h *benchTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmds)
	}
}

// benchValkey returns a client of the Valkey server with a round-trip
// counter, closed when the benchmark ends.
func benchValkey(b testing.TB) (*redis.Client, *benchTrips) {
	client := testserver.ValkeyClient(b, testserver.ValkeyAddr(b), "")
	trips := &benchTrips{}
	client.AddHook(trips)
	return client, trips
}

// benchValkeyKey returns a store over client, on the script path or the
// WATCH path, and a key of the benchmark's own, deleted when it ends.
func benchValkeyKey(b *testing.B, client *redis.Client, script bool) (*writefence.ValkeyConditionalStore, string) {
	key := testserver.UniqueName(b)
	b.Cleanup(func() { _ = client.Del(context.Background(), key).Err() })
	store := writefence.NewValkeyConditionalStore(client)
	store.Script = script
	return store, key
}

// BenchmarkValkeyPut compares, for one value of each size, a plain SET
// (the floor), PutIfVersion on the WATCH/MULTI path and PutIfVersion with
// Script set. Both PutIfVersion paths check the value they overwrite
// against its digest: the WATCH path reads it whole, the script hashes it
// on the server.
func BenchmarkValkeyPut(b *testing.B) {
	client, trips := benchValkey(b)
	for _, size := range benchSizes {
		value := benchPayload(size.n)
		for _, impl := range []string{"set", "watch", "script"} {
			b.Run("size="+size.name+"/impl="+impl, func(b *testing.B) {
				ctx := context.Background()
				store, key := benchValkeyKey(b, client, impl == "script")
				// The first write also checks the server and loads the script.
				version, err := store.PutIfVersion(ctx, key, value, "")
				if err != nil {
					b.Fatal(err)
				}
				b.SetBytes(int64(len(value)))
				b.ReportAllocs()
				start := trips.n.Load()
				for b.Loop() {
					if impl == "set" {
						err = client.Set(ctx, key, value, 0).Err()
					} else {
						version, err = store.PutIfVersion(ctx, key, value, version)
					}
					if err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(trips.n.Load()-start)/float64(b.N), "roundtrips/op")
			})
		}
	}
}

// BenchmarkValkeyRead compares the reads a Fence makes of a record: Get
// (the whole value, checked on the client), GetPrefix of one header's worth
// without Script (which reads and checks the whole value, as Get) and with
// Script (checked on the server, only the prefix sent back).
// bytes-read/op counts the bytes received from the server.
func BenchmarkValkeyRead(b *testing.B) {
	client, trips := benchValkey(b)
	wire := &valkeyByteCounter{}
	client.AddHook(wire)
	for _, size := range benchSizes {
		for _, impl := range []string{"get", "prefix-watch", "prefix-script"} {
			b.Run("size="+size.name+"/impl="+impl, func(b *testing.B) {
				ctx := context.Background()
				store, key := benchValkeyKey(b, client, impl == "prefix-script")
				if _, err := store.PutIfVersion(ctx, key, benchPayload(size.n), ""); err != nil {
					b.Fatal(err)
				}
				if _, _, _, err := store.GetPrefix(ctx, key, defaults.MaxHeaderSize); err != nil {
					b.Fatal(err) // loads the script
				}
				b.ReportAllocs()
				start, read := trips.n.Load(), wire.n.Load()
				for b.Loop() {
					var err error
					if impl == "get" {
						_, _, err = store.Get(ctx, key)
					} else {
						_, _, _, err = store.GetPrefix(ctx, key, defaults.MaxHeaderSize)
					}
					if err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(trips.n.Load()-start)/float64(b.N), "roundtrips/op")
				b.ReportMetric(float64(wire.n.Load()-read)/float64(b.N), "bytes-read/op")
			})
		}
	}
}

// BenchmarkContention races 32 writers on one shard. In every round each
// writer, with a Fence of its own kept across rounds, pushes the next epoch
// of a shared ascending counter, all released at once. A push lands or is
// refused as stale; any other outcome (retries exhausted) counts as gaveup.
// Reported per round: landed pushes, wasted store calls per landed push
// (every call but the landing write), and the most conflicts any one
// writer's push met (retries/op for the slowest writer of the round,
// averaged; max-retries is the worst round).
func BenchmarkContention(b *testing.B) {
	const writers = 32
	b.Run(fmt.Sprintf("store=mem/writers=%d", writers), func(b *testing.B) {
		benchContention(b, &writefence.MemStore{}, writers, nil)
	})
	b.Run(fmt.Sprintf("store=valkey/writers=%d", writers), func(b *testing.B) {
		client, trips := benchValkey(b)
		store := writefence.NewValkeyConditionalStore(client)
		benchContention(b, store, writers, trips)
	})
}

func benchContention(b *testing.B, store writefence.ConditionalStore, writers int, trips *benchTrips) {
	ctx := context.Background()
	prefix := testserver.UniqueName(b) + "/"
	if d, ok := store.(writefence.Deleter); ok {
		b.Cleanup(func() {
			key, err := keys.Shard(prefix, "wal", "0")
			if err == nil {
				_ = d.Delete(context.Background(), key)
			}
		})
	}
	counters := make([]*countingStore, writers)
	fences := make([]*writefence.Fence, writers)
	for i := range fences {
		counters[i] = &countingStore{ConditionalStore: store}
		fences[i] = &writefence.Fence{Store: counters[i], Prefix: prefix}
	}
	var (
		epoch                    atomic.Uint64
		landed, stale, gaveUp    atomic.Int64
		slowestSum, slowestWorst int64
	)
	trips0 := int64(0)
	if trips != nil {
		trips0 = trips.n.Load()
	}
	for b.Loop() {
		before := make([]int64, writers)
		for i, c := range counters {
			before[i] = c.conflicts.Load()
		}
		var start, done sync.WaitGroup
		start.Add(1)
		for i, f := range fences {
			done.Go(func() {
				start.Wait()
				err := f.Push(ctx, "wal", "0", fmt.Sprintf("w%d", i), epoch.Add(1), []byte("segment"))
				switch {
				case err == nil:
					landed.Add(1)
				case errors.Is(err, writefence.ErrStaleEpoch):
					stale.Add(1)
				default:
					gaveUp.Add(1)
				}
			})
		}
		start.Done()
		done.Wait()
		slowest := int64(0)
		for i, c := range counters {
			slowest = max(slowest, c.conflicts.Load()-before[i])
		}
		slowestSum += slowest
		slowestWorst = max(slowestWorst, slowest)
	}
	calls := int64(0)
	for _, c := range counters {
		calls += c.roundTrips()
	}
	n := float64(b.N)
	l := float64(landed.Load())
	b.ReportMetric(l/n, "landed/op")
	b.ReportMetric(float64(stale.Load())/n, "stale/op")
	b.ReportMetric(float64(gaveUp.Load())/n, "gaveup/op")
	b.ReportMetric((float64(calls)-l)/l, "wasted-calls/landed")
	if trips != nil {
		b.ReportMetric(float64(trips.n.Load()-trips0)/l, "wire-roundtrips/landed")
	}
	b.ReportMetric(float64(slowestSum)/n, "slowest-retries/op")
	b.ReportMetric(float64(slowestWorst), "max-retries")
}

// BenchmarkPushMemory pushes 64 MiB payloads, for the bytes a push
// allocates beyond the raw conditional write (-benchmem's B/op): an upper
// bound on how much the heap grows while it runs. The directory store
// sends nothing over a network, so its roundtrips/op and bytes-read/op are
// zero. Run it with a few iterations:
//
//	go test -run '^$' -bench '^BenchmarkPushMemory$' -benchmem -benchtime 5x -count 5 .
func BenchmarkPushMemory(b *testing.B) {
	payload := benchPayload(64 << 20)
	stores := []struct {
		name string
		open func(b *testing.B) (writefence.ConditionalStore, *benchTransport)
	}{
		{"valkey", valkeyPushMemoryStore},
		{"s3", func(b *testing.B) (writefence.ConditionalStore, *benchTransport) { return countedMinioStore(b) }},
		{"gcs", func(b *testing.B) (writefence.ConditionalStore, *benchTransport) { return countedGCSStore(b) }},
		{"dir", func(b *testing.B) (writefence.ConditionalStore, *benchTransport) {
			return newDirStore(b, b.TempDir()), &benchTransport{testserver.NewTransport(b)}
		}},
	}
	for _, s := range stores {
		for _, impl := range []string{"raw", "fenced", "cold"} {
			b.Run("store="+s.name+"/size=64MiB/impl="+impl, func(b *testing.B) {
				store, wire := s.open(b)
				benchPushImpl(b, store, wire, impl, payload)
			})
		}
	}
}

// BenchmarkBlob streams a 1 GiB blob to MinIO in 16 MiB parts: Fence.PutBlob
// (impl=fenced: the adapter's CreateBlob, If-None-Match on the upload, the
// CRC-32C the Fence takes as the bytes go by, the HEAD that reads the
// blob's info) against minio-go's own PutObject of the same bytes, of
// unknown size with the same part size (impl=raw), and the same with
// DisableContentSha256 (impl=rawunsigned: each part sent whole as
// UNSIGNED-PAYLOAD, where over plain HTTP minio-go otherwise signs it in
// 64 KiB chunks, the streaming signature). MB/s is the blob's size
// over the time of one upload. peak-heap-MiB is the largest growth of the
// heap's objects seen during an upload, sampled every millisecond: what
// the upload holds and the garbage it made that the GC has not yet freed
// (with GOGC=100 a heap is let grow to twice what was live at the last
// GC); peak-live-MiB the largest growth of what a GC found live, which is
// what the upload holds. Each upload's
// object is deleted, off the clock. It needs the S3 server (.ci/run's
// environment) and is not run by bench/run or CI; run the test binary
// with a count of 1 a few times over, so that the implementations
// alternate (BENCHMARKS.md, "Streams"):
//
//	go test -c -o blob.test .
//	for i in $(seq 8); do ./blob.test -test.run '^$' -test.bench '^BenchmarkBlob$' -test.benchtime 1x -test.count 1; done
func BenchmarkBlob(b *testing.B) {
	const size, part = 1 << 30, 16 << 20
	c := testserver.S3Server(b).Client(b, nil)
	bucket := testserver.MinioBucket(b, c)
	store := writefence.NewMinioConditionalStore(c, bucket)
	store.BlobPartSize = part
	for _, impl := range []string{"raw", "rawunsigned", "fenced"} {
		b.Run("store=s3/size=1GiB/impl="+impl, func(b *testing.B) {
			ctx := context.Background()
			prefix := testserver.UniqueName(b) + "/"
			fence := &writefence.Fence{Store: store, Prefix: prefix}
			var grewObjects, grewLive float64
			for i := 0; b.Loop(); i++ {
				runtime.GC()
				base := readHeap()
				stop := heapPeak()
				key := fmt.Sprintf("%sraw-%d", prefix, i)
				switch impl {
				case "raw", "rawunsigned":
					_, err := c.PutObject(ctx, bucket, key, newPattern(size, byte(i)), -1,
						minio.PutObjectOptions{PartSize: part, ContentType: "application/octet-stream", DisableContentSha256: impl == "rawunsigned"})
					if err != nil {
						b.Fatal(err)
					}
				case "fenced":
					ref, err := fence.PutBlob(ctx, "wal", "0", "w", uint64(i+1), newPattern(size, byte(i)))
					if err != nil {
						b.Fatal(err)
					}
					if key, err = keys.Blob(prefix, "wal", "0", ref.Name); err != nil {
						b.Fatal(err)
					}
				}
				objects, live := stop().growth(base)
				grewObjects, grewLive = max(grewObjects, objects), max(grewLive, live)
				b.StopTimer()
				if err := c.RemoveObject(ctx, bucket, key, minio.RemoveObjectOptions{}); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(size)*float64(b.N)/b.Elapsed().Seconds()/1e6, "MB/s")
			b.ReportMetric(grewObjects, "peak-heap-MiB")
			b.ReportMetric(grewLive, "peak-live-MiB")
		})
	}
}

// benchBlobStores are the stores the stream benchmarks run over, each
// with the transport that counts its traffic (none for the local ones).
var benchBlobStores = []struct {
	name string
	open func(b *testing.B) (writefence.ConditionalStore, *benchTransport)
}{
	{"mem", func(*testing.B) (writefence.ConditionalStore, *benchTransport) { return &writefence.MemStore{}, nil }},
	{"dir", func(b *testing.B) (writefence.ConditionalStore, *benchTransport) {
		return newDirStore(b, b.TempDir()), nil
	}},
	{"s3", func(b *testing.B) (writefence.ConditionalStore, *benchTransport) { return countedMinioStore(b) }},
	{"gcs", func(b *testing.B) (writefence.ConditionalStore, *benchTransport) { return countedGCSStore(b) }},
}

// requests returns the requests wire sent so far; none for a local store.
func (t *benchTransport) requests() int64 {
	if t == nil {
		return 0
	}
	return t.Requests()
}

// BenchmarkCommitBlobs: a Commit whose manifest newly references n blobs
// uploaded before it, for n = 1 and 1,000 (impl=commit). Two sets of n
// blobs, written at epochs 1 and 2, are referenced in turn, so every
// commit newly references n blobs and no upload is timed. Commit reads
// the record, checks each new blob with one StatBlob and writes once
// (asserted in testCommitManyBlobs); stats/op counts the StatBlobs.
// impl=list is not a commit: it is one ListBlobs of the blobs of one
// epoch of the shard (n of them), what a commit checking many blobs of one
// epoch with a listing instead would pay for the check.
func BenchmarkCommitBlobs(b *testing.B) {
	for _, s := range benchBlobStores {
		for _, n := range []int{1, 1000} {
			b.Run(fmt.Sprintf("store=%s/blobs=%d", s.name, n), func(b *testing.B) {
				benchCommitBlobs(b, s.open, n)
			})
		}
	}
}

func benchCommitBlobs(b *testing.B, open func(*testing.B) (writefence.ConditionalStore, *benchTransport), n int) {
	ctx := context.Background()
	store, wire := open(b)
	blobs := newCountedBlobs(b, store)
	prefix := testserver.UniqueName(b) + "/"
	f := &writefence.Fence{Store: store, Blobs: blobs, Prefix: prefix}
	var sets [2][]writefence.BlobRef
	for i := range sets {
		for j := range n {
			ref, err := f.PutBlob(ctx, "wal", "0", "w", uint64(i+1), strings.NewReader(fmt.Sprintf("segment %d of set %d", j, i)))
			if err != nil {
				b.Fatal(err)
			}
			sets[i] = append(sets[i], ref)
		}
	}
	space, err := keys.Blobs(prefix, "wal", "0")
	if err != nil {
		b.Fatal(err)
	}
	epoch := uint64(2)
	for _, impl := range []string{"commit", "list"} {
		b.Run("impl="+impl, func(b *testing.B) {
			b.ReportAllocs()
			reqs, stats := wire.requests(), blobs.calls.stat.Load()
			for i := 0; b.Loop(); i++ {
				switch impl {
				case "commit":
					epoch++
					set := sets[i%2]
					err = f.Commit(ctx, "wal", "0", "w", epoch, func(m writefence.Manifest) (writefence.Manifest, error) {
						return writefence.Manifest{Payload: m.Payload, Blobs: set}, nil
					})
				case "list":
					listed := 0
					err = blobs.bs.ListBlobs(ctx, fmt.Sprintf("%s%016x-", space, i%2+1), func(writefence.BlobInfo) error {
						listed++
						return nil
					})
					if err == nil && listed != n {
						err = fmt.Errorf("listed %d blobs, not %d", listed, n)
					}
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			nOps := float64(b.N)
			b.ReportMetric(float64(wire.requests()-reqs)/nOps, "roundtrips/op")
			b.ReportMetric(float64(blobs.calls.stat.Load()-stats)/nOps, "stats/op")
		})
	}
}

// BenchmarkStream ships a WAL to one shard in 64 KiB segments, 16 a op
// (1 MiB), over MinIO and the GCS emulator, four ways:
//
//	push      Fence.Push of each segment to the shard's record, by the
//	          writer that pushed last (steady state: the write alone)
//	blob1     each segment a blob (PutBlob), then a Commit of a manifest
//	          that adds it
//	blob16    the 16 blobs put one after another, then one Commit that
//	          adds them all
//	blob16x4  the 16 blobs put by 4 uploaders at once, then one Commit
//
// A Commit is made at the next epoch and reads the record first (it has no
// version cache); the manifest keeps the last 64 segments (a WAL truncated
// at snapshots), and those it drops are left to Collect, which does not
// run here. segments/s is the segments shipped per second, roundtrips/
// segment the requests sent per segment, record-writes/segment the
// conditional writes of the record per segment (testserver.Traced): the
// rate one record's writes cap, 1 for a push and 1/16 for a batched
// commit.
func BenchmarkStream(b *testing.B) {
	const segment, batch, window = 64 << 10, 16, 64
	payload := benchPayload(segment)
	for _, s := range benchBlobStores[2:] {
		for _, impl := range []string{"push", "blob1", "blob16", "blob16x4"} {
			b.Run("store="+s.name+"/impl="+impl, func(b *testing.B) {
				store, wire := s.open(b)
				ctx, trace := testserver.Traced(context.Background())
				f := &writefence.Fence{Store: store, Prefix: testserver.UniqueName(b) + "/"}
				epoch := uint64(1)
				if err := f.Push(ctx, "wal", "0", "w", epoch, payload); err != nil {
					b.Fatal(err)
				}
				put := func() (writefence.BlobRef, error) {
					return f.PutBlob(ctx, "wal", "0", "w", epoch, bytes.NewReader(payload))
				}
				commit := func(refs ...writefence.BlobRef) error {
					return f.Commit(ctx, "wal", "0", "w", epoch, func(m writefence.Manifest) (writefence.Manifest, error) {
						all := slices.Concat(m.Blobs, refs)
						return writefence.Manifest{Blobs: all[max(0, len(all)-window):]}, nil
					})
				}
				b.SetBytes(batch * segment)
				b.ReportAllocs()
				reqs, writes := wire.requests(), trace.Writes()
				for b.Loop() {
					var err error
					switch impl {
					case "push":
						for range batch {
							epoch++
							if err = f.Push(ctx, "wal", "0", "w", epoch, payload); err != nil {
								break
							}
						}
					case "blob1":
						for range batch {
							epoch++
							var ref writefence.BlobRef
							if ref, err = put(); err == nil {
								err = commit(ref)
							}
							if err != nil {
								break
							}
						}
					case "blob16", "blob16x4":
						epoch++
						refs := make([]writefence.BlobRef, batch)
						errs := make([]error, batch)
						uploaders := 1
						if impl == "blob16x4" {
							uploaders = 4
						}
						var wg sync.WaitGroup
						for u := range uploaders {
							wg.Go(func() {
								for i := u; i < batch; i += uploaders {
									refs[i], errs[i] = put()
								}
							})
						}
						wg.Wait()
						if err = errors.Join(errs...); err == nil {
							err = commit(refs...)
						}
					}
					if err != nil {
						b.Fatal(err)
					}
				}
				segments := float64(b.N * batch)
				b.ReportMetric(segments/b.Elapsed().Seconds(), "segments/s")
				b.ReportMetric(float64(wire.requests()-reqs)/segments, "roundtrips/segment")
				b.ReportMetric(float64(trace.Writes()-writes)/segments, "record-writes/segment")
			})
		}
	}
}
