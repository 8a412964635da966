//go:build !writefence_nominio && !writefence_nosdk

package writefence_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/minio/minio-go/v7"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/keys"
	"github.com/writefence/writefence/internal/testserver"
)

// The parts of the MinIO shipper (BenchmarkShipper), one at a time.

// BenchmarkS3BlobPut puts 64 KiB segments one after another, each a new
// key, three ways side by side:
//
//	raw        minio-go's PutObject of a known size, as the shipper's raw
//	           uploads (over plain HTTP it signs the body in chunks)
//	writeblob  the store's WriteBlob: one PUT with If-None-Match: *, its
//	           SHA-256 signed and its CRC-32C sent
//	putblob    Fence.PutBlob, which writes through WriteBlob
//
//	go test -c -o cur.test .
//	for i in $(seq 8); do ./cur.test -test.run '^$' -test.bench '^BenchmarkS3BlobPut$' -test.benchtime 400x -test.benchmem -test.count 1 >> put.txt; done
//	benchstat -col /impl put.txt
func BenchmarkS3BlobPut(b *testing.B) {
	c := testserver.S3Server(b).Client(b, nil)
	bucket := testserver.MinioBucket(b, c)
	store := writefence.NewMinioStore(c, bucket)
	f := &writefence.Fence{Store: store}
	segment := bytes.Repeat([]byte("segment "), 8<<10) // 64 KiB
	ctx := context.Background()
	seq := 0
	for _, impl := range []string{"raw", "writeblob", "putblob"} {
		b.Run("size=64KiB/impl="+impl, func(b *testing.B) {
			b.SetBytes(int64(len(segment)))
			for b.Loop() {
				seq++
				key := fmt.Sprintf("put/%s/%08d", impl, seq)
				var err error
				switch impl {
				case "raw":
					_, err = c.PutObject(ctx, bucket, key, bytes.NewReader(segment), int64(len(segment)), minio.PutObjectOptions{ContentType: "application/octet-stream"})
				case "writeblob":
					_, err = writefence.WriteBlob(ctx, store, key, bytes.NewReader(segment))
				case "putblob":
					_, err = f.PutBlob(ctx, "wal", "0", "shipper", 1, bytes.NewReader(segment))
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkS3EpochListing lists the 16 blobs of one epoch, as a commit
// checks the blobs its writer just put, in a shard whose blob space
// holds blobs=N blobs, 16 an epoch: on MinIO the listing of a prefix
// that ends inside the shard's folder takes longer the more it holds.
//
//	go test -c -o cur.test .
//	for i in $(seq 8); do ./cur.test -test.run '^$' -test.bench '^BenchmarkS3EpochListing$' -test.benchtime 200x -test.count 1 >> list.txt; done
//	benchstat -col /blobs list.txt
func BenchmarkS3EpochListing(b *testing.B) {
	c := testserver.S3Server(b).Client(b, nil)
	bucket := testserver.MinioBucket(b, c)
	var store writefence.BlobStore = writefence.NewMinioStore(c, bucket)
	space, err := keys.Blobs("", "wal", "0")
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	epoch := uint64(0)
	for _, n := range []int{64, 1024, 4096} {
		for ; epoch*16 < uint64(n); epoch++ {
			for i := range 16 {
				name := keys.BlobName(epoch+1, "shipper", fmt.Sprintf("%032x", i))
				if _, err := c.PutObject(ctx, bucket, space+name, bytes.NewReader([]byte("x")), 1, minio.PutObjectOptions{}); err != nil {
					b.Fatal(err)
				}
			}
		}
		prefix := space + keys.BlobEpochPrefix(epoch)
		b.Run(fmt.Sprintf("blobs=%d", n), func(b *testing.B) {
			for b.Loop() {
				found := 0
				if err := store.ListBlobs(ctx, prefix, func(writefence.BlobInfo) error { found++; return nil }); err != nil {
					b.Fatal(err)
				}
				if found != 16 {
					b.Fatalf("listed %d blobs of epoch %d, want 16", found, epoch)
				}
			}
		})
	}
}
