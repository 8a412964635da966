// Package pushbench is the BenchmarkPush of the store packages that
// compare their raw conditional write with a Fence's push the same way
// (azblobstore, pgstore): one benchmark, so their figures mean the same.
// It is not part of the public API.
package pushbench

import (
	"context"
	"testing"
	"time"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/testserver"
)

// Run runs, at 1 KiB, one sub-benchmark an implementation (impl=...):
// raw, the store's PutIfVersion conditioned on the version the previous
// write returned (the floor); rawrecord, the same for a payload of the
// fenced record's size; fenced, a steady Fence.Push by one writer pushing
// consecutive epochs, which conditions each write on the version it last
// wrote without reading; paired, one rawrecord write and one push in
// turn, each timed. trips returns the round trips store made so far, for
// roundtrips/op.
func Run(b *testing.B, store writefence.ConditionalStore, trips func() int64) {
	payload := make([]byte, 1<<10)
	for i := range payload {
		payload[i] = byte(i*31 + 7)
	}
	for _, impl := range []string{"raw", "rawrecord", "fenced", "paired"} {
		b.Run("size=1KiB/impl="+impl, func(b *testing.B) {
			push(b, store, impl, payload, trips)
		})
	}
}

// Fenced returns a Fence over a prefix of store of the benchmark's own,
// and the prefix, once the Fence pushed payload to shard (wal, 0) at
// epoch 1.
func Fenced(b *testing.B, store writefence.ConditionalStore, payload []byte) (*writefence.Fence, string) {
	prefix := testserver.UniqueName(b) + "/"
	fence := &writefence.Fence{Store: store, Prefix: prefix}
	if err := fence.Push(context.Background(), "wal", "0", "w", 1, payload); err != nil {
		b.Fatal(err)
	}
	return fence, prefix
}

// push runs one implementation of Run.
func push(b *testing.B, store writefence.ConditionalStore, impl string, payload []byte, trips func() int64) {
	ctx := context.Background()
	fence, prefix := Fenced(b, store, payload)
	epoch := uint64(1)
	record, _, err := store.Get(ctx, prefix+"s/wal/0")
	if err != nil {
		b.Fatal(err)
	}
	data := payload
	if impl == "rawrecord" {
		data = make([]byte, len(record))
		copy(data, payload)
	}
	version, err := store.PutIfVersion(ctx, prefix+"raw", data, "")
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(payload)))
	b.ReportAllocs()
	start := trips()
	if impl == "paired" {
		// One raw write of the record's size and one push in turn, each
		// timed: a machine whose load drifts slows both alike, so their
		// ratio holds where two separate runs would not.
		data = make([]byte, len(record))
		copy(data, payload)
		var raw, fenced time.Duration
		for b.Loop() {
			epoch++
			t0 := time.Now()
			if version, err = store.PutIfVersion(ctx, prefix+"raw", data, version); err != nil {
				b.Fatal(err)
			}
			t1 := time.Now()
			if err = fence.Push(ctx, "wal", "0", "w", epoch, payload); err != nil {
				b.Fatal(err)
			}
			raw, fenced = raw+t1.Sub(t0), fenced+time.Since(t1)
		}
		b.ReportMetric(float64(raw.Nanoseconds())/float64(b.N), "raw-ns/op")
		b.ReportMetric(float64(fenced.Nanoseconds())/float64(b.N), "fenced-ns/op")
		b.ReportMetric(float64(fenced)/float64(raw), "fenced/raw")
		b.ReportMetric(float64(trips()-start)/float64(2*b.N), "roundtrips/op")
		return
	}
	for b.Loop() {
		epoch++
		if impl == "fenced" {
			err = fence.Push(ctx, "wal", "0", "w", epoch, payload)
		} else {
			version, err = store.PutIfVersion(ctx, prefix+"raw", data, version)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(trips()-start)/float64(b.N), "roundtrips/op")
}
