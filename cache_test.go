package writefence_test

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/writefence/writefence"
)

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
