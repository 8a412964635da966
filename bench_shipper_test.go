//go:build !writefence_nominio && !writefence_nogcs && !writefence_novalkey && !writefence_nosdk

package writefence_test

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/testserver"
)

// BenchmarkShipper ships a WAL as a user of the package writes it, against
// raw uploads of the same segments, side by side, on MinIO and the GCS
// emulator: segments of 64 KiB and 4 MiB, uploaded by 1, 4 or 16
// uploaders at once.
//
//	fenced  a Lease held on the shard (Hold); each batch of 16 segments
//	        takes the next epoch of the lease, each segment goes up with
//	        Fence.PutBlob at that epoch, and once the 16 are up a
//	        committer adds them to the manifest with one Fence.Commit at
//	        that epoch (the manifest keeps the last 64 segments), while
//	        the uploaders go on with the next batches
//	raw     the same segments, by the same uploaders, each one
//	        unconditional upload with the SDK's plain call (minio-go's
//	        PutObject of a known size; a GCS Writer with its defaults,
//	        which is a resumable upload), and no manifest
//
// One op is a batch of 16 segments. segments/s is the segments shipped
// per second (for fenced, committed: the last commit is waited for);
// requests/segment the HTTP requests sent per segment.
//
//	go test -c -o cur.test .
//	for i in $(seq 6); do ./cur.test -test.run '^$' -test.bench '^BenchmarkShipper$' -test.benchtime 2s -test.count 1 >> shipper.txt; done
//	benchstat -row '.name /store /size /uploaders' -col '/impl@(raw fenced)' shipper.txt
func BenchmarkShipper(b *testing.B) {
	const batch, window = 16, 64
	for _, store := range []string{"s3", "gcs"} {
		for _, size := range []struct {
			name string
			n    int
		}{{"64KiB", 64 << 10}, {"4MiB", 4 << 20}} {
			segment := benchPayload(size.n)
			for _, uploaders := range []int{1, 4, 16} {
				for _, impl := range []string{"raw", "fenced"} {
					b.Run(fmt.Sprintf("store=%s/size=%s/uploaders=%d/impl=%s", store, size.name, uploaders, impl), func(b *testing.B) {
						s := openShipperStore(b, store)
						var ship func(ctx context.Context, batches int) error
						if impl == "raw" {
							ship = s.raw(segment, uploaders, batch)
						} else {
							ship = s.fenced(b, segment, uploaders, batch, window)
						}
						ctx := context.Background()
						// One batch before the clock runs: connections open, the
						// lease held, the manifest in place.
						if err := ship(ctx, 1); err != nil {
							b.Fatal(err)
						}
						b.SetBytes(int64(batch * size.n))
						reqs := s.wire.Requests()
						b.ResetTimer()
						if err := ship(ctx, b.N); err != nil {
							b.Fatal(err)
						}
						b.StopTimer()
						segments := float64(b.N * batch)
						b.ReportMetric(segments/b.Elapsed().Seconds(), "segments/s")
						b.ReportMetric(float64(s.wire.Requests()-reqs)/segments, "requests/segment")
					})
				}
			}
		}
	}
}

// shipperStore is one bucket of a server, reached through a counting
// transport: the fenced shipper's store, and the raw uploads' client.
type shipperStore struct {
	wire   *testserver.Transport
	store  writefence.ConditionalStore
	put    func(ctx context.Context, key string, data []byte) error
	prefix string
}

func openShipperStore(b *testing.B, name string) *shipperStore {
	s := &shipperStore{wire: testserver.NewTransport(b), prefix: testserver.UniqueName(b) + "/"}
	switch name {
	case "s3":
		c := testserver.S3Server(b).Client(b, s.wire)
		bucket := testserver.MinioBucket(b, c)
		s.store = writefence.NewMinioStore(c, bucket)
		s.put = func(ctx context.Context, key string, data []byte) error {
			_, err := c.PutObject(ctx, bucket, key, bytes.NewReader(data), int64(len(data)), minio.PutObjectOptions{ContentType: "application/octet-stream"})
			return err
		}
	case "gcs":
		c := testserver.GCSClient(b, testserver.GCSEndpoint(b), s.wire)
		bucket := testserver.GCSBucket(b, c)
		s.store = writefence.NewGCSStore(c, bucket)
		s.put = func(ctx context.Context, key string, data []byte) error {
			w := c.Bucket(bucket).Object(key).NewWriter(ctx)
			if _, err := w.Write(data); err != nil {
				w.Close()
				return err
			}
			return w.Close()
		}
	default:
		b.Fatalf("unknown store %q", name)
	}
	return s
}

// upload runs batches of size segments through uploaders goroutines, in
// order, calling up for each segment and done once each batch is up.
func upload(ctx context.Context, batches, size, uploaders int, up func(batch, i int) error, done func(batch int) error) error {
	type job struct{ batch, i int }
	jobs := make(chan job)
	left := make([]int, batches) // segments of each batch still going up
	var mu sync.Mutex            // guards left and first
	var first error
	complete := make(chan int, batches)
	var wg sync.WaitGroup
	for range uploaders {
		wg.Go(func() {
			for j := range jobs {
				err := up(j.batch, j.i)
				mu.Lock()
				if err != nil && first == nil {
					first = err
				}
				if left[j.batch]--; left[j.batch] == 0 {
					complete <- j.batch
				}
				mu.Unlock()
			}
		})
	}
	committed := make(chan error, 1)
	go func() {
		// Batches complete out of order; they are committed in order.
		ready, next := map[int]bool{}, 0
		var err error
		for n := range complete {
			ready[n] = true
			for ready[next] {
				if err == nil {
					err = done(next)
				}
				next++
			}
			if next == batches {
				break
			}
		}
		committed <- err
	}()
	for n := range batches {
		mu.Lock()
		left[n] = size
		mu.Unlock()
		for i := range size {
			select {
			case jobs <- job{n, i}:
			case <-ctx.Done():
			}
		}
	}
	close(jobs)
	wg.Wait()
	err := <-committed
	if first != nil {
		return first
	}
	return err
}

// raw ships with unconditional uploads.
func (s *shipperStore) raw(segment []byte, uploaders, size int) func(ctx context.Context, batches int) error {
	var seq int
	return func(ctx context.Context, batches int) error {
		base := seq
		seq += batches
		return upload(ctx, batches, size, uploaders, func(batch, i int) error {
			return s.put(ctx, fmt.Sprintf("%sraw/%08d-%02d", s.prefix, base+batch, i), segment)
		}, func(int) error { return nil })
	}
}

// fenced ships under a Lease, with PutBlob and Commit.
func (s *shipperStore) fenced(b *testing.B, segment []byte, uploaders, size, window int) func(ctx context.Context, batches int) error {
	const plugin, shard, writer = "wal", "0", "shipper"
	f := &writefence.Fence{Store: s.store, Prefix: s.prefix}
	lease := &writefence.Lease{Fence: f, Name: "wal-0", Holder: writer, TTL: time.Minute}
	held, err := lease.Hold(context.Background(), writefence.Shard{Plugin: plugin, Shard: shard})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = lease.Release(context.Background()) })
	return func(_ context.Context, batches int) error {
		epochs := make([]uint64, batches)
		refs := make([][]writefence.BlobRef, batches)
		for n := range batches {
			e, err := lease.Epoch(held, plugin, shard)
			if err != nil {
				return err
			}
			epochs[n], refs[n] = e, make([]writefence.BlobRef, size)
		}
		return upload(held, batches, size, uploaders, func(batch, i int) error {
			ref, err := f.PutBlob(held, plugin, shard, writer, epochs[batch], bytes.NewReader(segment))
			refs[batch][i] = ref
			return err
		}, func(batch int) error {
			return f.Commit(held, plugin, shard, writer, epochs[batch], func(m writefence.Manifest) (writefence.Manifest, error) {
				all := slices.Concat(m.Blobs, refs[batch])
				return writefence.Manifest{Payload: m.Payload, Blobs: all[max(0, len(all)-window):]}, nil
			})
		})
	}
}
