package writefence_test

import (
	"context"
	"crypto/md5"
	"crypto/sha256"
	"crypto/sha512"
	"fmt"
	"hash"
	"hash/crc32"
	"hash/crc64"
	"hash/fnv"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/zeebo/blake3"
	"github.com/zeebo/xxh3"

	"github.com/writefence/writefence"
)

// BenchmarkPush measures a writer pushing consecutive epochs to one shard of
// the in-memory store, reporting store round trips per push beside time
// and allocations. "steady" lets the fence condition each write on the
// version it last wrote; "read-first" gives every push a fresh Fence, so
// each one reads the record before writing, as a fence without a version
// cache would.
func BenchmarkPush(b *testing.B) {
	for _, size := range []int{1 << 10, 1 << 20} {
		payload := make([]byte, size)
		for _, mode := range []string{"steady", "read-first"} {
			b.Run(fmt.Sprintf("%s/%dKiB", mode, size>>10), func(b *testing.B) {
				ctx := context.Background()
				store := counted(&writefence.MemStore{})
				f := &writefence.Fence{Store: store}
				epoch := uint64(1)
				if err := f.Push(ctx, "wal", "0", "w", epoch, payload); err != nil {
					b.Fatal(err)
				}
				start := roundTrips(store)
				b.SetBytes(int64(size))
				b.ReportAllocs()
				for b.Loop() {
					epoch++
					if mode == "read-first" {
						f = &writefence.Fence{Store: store}
					}
					if err := f.Push(ctx, "wal", "0", "w", epoch, payload); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(roundTrips(store)-start)/float64(b.N), "roundtrips/op")
			})
		}
	}
}

// BenchmarkDigest measures, side by side, the candidates for the digest a
// record carries of its payload: the one pass over the payload that a push
// makes before (or while) it sends it. The record code takes only the
// standard library; BLAKE3 and XXH3 are measured as the best a dependency
// could give.
//
//	go test -run '^$' -bench '^BenchmarkDigest$' -benchmem -count 10 . | tee digest.txt
//	benchstat -col /digest digest.txt
func BenchmarkDigest(b *testing.B) {
	castagnoli, ecma := crc32.MakeTable(crc32.Castagnoli), crc64.MakeTable(crc64.ECMA)
	digests := []struct {
		name string
		sum  func([]byte)
	}{
		{"sha256", func(p []byte) { _ = sha256.Sum256(p) }},
		{"sha512-256", func(p []byte) { _ = sha512.Sum512_256(p) }},
		{"md5", func(p []byte) { _ = md5.Sum(p) }},
		{"crc32c", func(p []byte) { _ = crc32.Checksum(p, castagnoli) }},
		{"crc64", func(p []byte) { _ = crc64.Checksum(p, ecma) }},
		{"fnv128a", func(p []byte) { sum(fnv.New128a(), p) }},
		{"blake3", func(p []byte) { _ = blake3.Sum256(p) }},
		{"xxh3-128", func(p []byte) { _ = xxh3.Hash128(p) }},
	}
	for _, size := range []struct {
		name string
		n    int
	}{{"1KiB", 1 << 10}, {"16MiB", 16 << 20}} {
		payload := make([]byte, size.n)
		for i := range payload {
			payload[i] = byte(i * 7)
		}
		for _, d := range digests {
			b.Run("size="+size.name+"/digest="+d.name, func(b *testing.B) {
				b.SetBytes(int64(size.n))
				b.ReportAllocs()
				for b.Loop() {
					d.sum(payload)
				}
			})
		}
	}
}

func sum(h hash.Hash, p []byte) {
	h.Write(p)
	_ = h.Sum(nil)
}

// BenchmarkManyShards measures a writer pushing round-robin to 100,000
// shards of the in-memory store: the round trips of a steady push (each
// shard's version is remembered, so a push makes one write and no read)
// and the Fence's memory per shard (the heap the version cache holds once
// every shard was pushed, after a collection), with the MemStore's own
// memory left out by a store that keeps nothing.
func BenchmarkManyShards(b *testing.B) {
	const shards = 100_000
	ctx := context.Background()
	store := counted(&forgetfulStore{})
	names := make([]string, shards)
	for i := range names {
		names[i] = fmt.Sprintf("shard-%06d", i)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f := &writefence.Fence{Store: store}
	for i, name := range names {
		if err := f.Push(ctx, "wal", name, "w", 1, []byte("x")); err != nil {
			b.Fatal(i, err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	perShard := float64(after.HeapAlloc-before.HeapAlloc) / shards
	start := roundTrips(store)
	epoch, i := uint64(1), 0
	b.ReportAllocs()
	for b.Loop() {
		if i == 0 {
			epoch++
		}
		if err := f.Push(ctx, "wal", names[i], "w", epoch, []byte("x")); err != nil {
			b.Fatal(err)
		}
		i = (i + 1) % shards
	}
	b.ReportMetric(float64(roundTrips(store)-start)/float64(b.N), "roundtrips/op")
	b.ReportMetric(perShard, "bytes/shard")
	runtime.KeepAlive(f)
}

// forgetfulStore accepts every conditional write and keeps nothing, so that
// a benchmark measures the Fence's memory alone. Its versions are 32 hex
// digits, as S3's ETags are.
type forgetfulStore struct{ n atomic.Uint64 }

func (s *forgetfulStore) Get(context.Context, string) ([]byte, string, error) {
	return nil, "", writefence.ErrNotFound
}

func (s *forgetfulStore) PutIfVersion(context.Context, string, []byte, string) (string, error) {
	return fmt.Sprintf("%032x", s.n.Add(1)), nil
}

// benchPayload returns n bytes of a pattern.
func benchPayload(n int) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(i*31 + 7)
	}
	return p
}
