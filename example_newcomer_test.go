package writefence_test

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/writefence/writefence"
)

// A first program, end to end on the in-memory store: node-a holds the
// lease of a shard, uploads a blob at an epoch of its term, commits the
// blob in the shard's manifest, and reads it back through the manifest.
//
// A plugin names the kind of data (here "wal"), a shard one independent
// stream of it (here "shard-0"); each (plugin, shard) has one record, the
// manifest, and blobs of its own. The manifest's list of blobs is what
// Commit's function returns: it gets the recorded list and adds the new
// reference. Readers get the list from Inspect (RecordInfo.Blobs), and
// OpenBlob opens only a blob on it.
func Example_leaseBlobManifest() {
	ctx := context.Background()
	fence := &writefence.Fence{Store: &writefence.MemStore{}}
	shard := writefence.Shard{Plugin: "wal", Shard: "shard-0"}

	// Hold takes the lease and seals the shard at the new term, so that
	// every earlier holder's writes are refused from now on.
	lease := &writefence.Lease{Fence: fence, Name: "wal/shard-0", Holder: "node-a", TTL: time.Minute}
	held, err := lease.Hold(ctx, shard)
	if err != nil {
		fmt.Println("hold:", err)
		return
	}
	epoch, err := lease.Epoch(held, shard.Plugin, shard.Shard)
	if err != nil {
		fmt.Println("epoch:", err)
		return
	}
	fmt.Println("node-a holds term", epoch>>32)

	// The blob: streamed in, of any size, at a key nobody else writes.
	ref, err := fence.PutBlob(held, shard.Plugin, shard.Shard, lease.Holder, epoch, strings.NewReader("segment 0001"))
	if err != nil {
		fmt.Println("put:", err)
		return
	}
	// The commit: the manifest now lists the blob, admitted at epoch.
	err = fence.Commit(held, shard.Plugin, shard.Shard, lease.Holder, epoch, func(m writefence.Manifest) (writefence.Manifest, error) {
		if !slices.Contains(m.Blobs, ref) { // a retry finds a commit that landed
			m.Blobs = append(m.Blobs, ref)
		}
		m.Payload = []byte("last segment: 0001")
		return m, nil
	})
	if err != nil {
		fmt.Println("commit:", err)
		return
	}

	// A reader follows the manifest.
	info, err := fence.Inspect(ctx, shard.Plugin, shard.Shard)
	if err != nil {
		fmt.Println("inspect:", err)
		return
	}
	fmt.Printf("manifest by %s: %q, %d blob\n", info.Writer, info.Payload, len(info.Blobs))
	for _, b := range info.Blobs {
		rc, _, err := fence.OpenBlob(ctx, shard.Plugin, shard.Shard, b.Name)
		if err != nil {
			fmt.Println("open:", err)
			return
		}
		data, err := io.ReadAll(rc) // checked against the reference as it streams
		rc.Close()
		if err != nil {
			fmt.Println("read:", err)
			return
		}
		fmt.Printf("blob of %d bytes: %s\n", b.Size, data)
	}
	fmt.Println("release:", lease.Release(ctx))
	// Output:
	// node-a holds term 1
	// manifest by node-a: "last segment: 0001", 1 blob
	// blob of 12 bytes: segment 0001
	// release: <nil>
}
