package writefence_test

import (
	"context"
	"fmt"
	"testing"

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
				store := &countingStore{ConditionalStore: &writefence.MemStore{}}
				f := &writefence.Fence{Store: store}
				epoch := uint64(1)
				if err := f.Push(ctx, "wal", "0", "w", epoch, payload); err != nil {
					b.Fatal(err)
				}
				start := store.roundTrips()
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
				b.ReportMetric(float64(store.roundTrips()-start)/float64(b.N), "roundtrips/op")
			})
		}
	}
}
