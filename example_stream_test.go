package writefence_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/writefence/writefence"
)

// A WAL shipper under a Lease: each segment goes up as a blob, and a
// manifest commit makes it part of the shard's state. node-a is deposed
// mid-stream, with a segment uploaded but not committed; node-b takes the
// lease over and seals. node-a's last segment is never visible to a
// reader, its commit is refused, and Collect deletes it at once.
func ExampleFence_Commit() {
	ctx := context.Background()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	fence := &writefence.Fence{Store: &writefence.MemStore{Clock: clock}}
	lease := func(holder string) *writefence.Lease {
		return &writefence.Lease{Fence: fence, Name: "wal/0", Holder: holder, TTL: 10 * time.Second, Clock: clock}
	}
	// ship uploads a segment and commits it into the manifest.
	ship := func(l *writefence.Lease, holder, segment string) (writefence.BlobRef, error) {
		epoch, err := l.Epoch(ctx, "wal", "0")
		if err != nil {
			return writefence.BlobRef{}, err
		}
		ref, err := fence.PutBlob(ctx, "wal", "0", holder, epoch, strings.NewReader(segment))
		if err != nil {
			return writefence.BlobRef{}, err
		}
		epoch, err = l.Epoch(ctx, "wal", "0")
		if err != nil {
			return ref, err
		}
		return ref, fence.Commit(ctx, "wal", "0", holder, epoch, func(m writefence.Manifest) (writefence.Manifest, error) {
			if !slices.Contains(m.Blobs, ref) { // a retry finds a commit that landed
				m.Blobs = append(m.Blobs, ref)
			}
			return m, nil
		})
	}

	a := lease("node-a")
	if _, err := a.Acquire(ctx); err != nil {
		fmt.Println(err)
		return
	}
	seal, _ := a.Epoch(ctx, "wal", "0")
	fmt.Println("node-a seals:", fence.Seal(ctx, "wal", "0", "node-a", seal))
	for _, seg := range []string{"segment 1", "segment 2"} {
		_, err := ship(a, "node-a", seg)
		fmt.Printf("node-a ships %s: %v\n", seg, err)
	}

	// node-a uploads segment 3 and stalls before committing it; its lease
	// expires and node-b takes over and seals.
	late, _ := a.Epoch(ctx, "wal", "0")
	orphan, _ := fence.PutBlob(ctx, "wal", "0", "node-a", late, strings.NewReader("segment 3"))
	now = now.Add(15 * time.Second)
	b := lease("node-b")
	term, _ := b.Acquire(ctx)
	seal, _ = b.Epoch(ctx, "wal", "0")
	fmt.Printf("node-b holds term %d and seals: %v\n", term, fence.Seal(ctx, "wal", "0", "node-b", seal))

	// node-a wakes up and commits its segment at the epoch it drew.
	err := fence.Commit(ctx, "wal", "0", "node-a", late+1, func(m writefence.Manifest) (writefence.Manifest, error) {
		m.Blobs = append(m.Blobs, orphan)
		return m, nil
	})
	fmt.Println("node-a's late commit refused:", errors.Is(err, writefence.ErrStaleEpoch))
	_, _, err = fence.OpenBlob(ctx, "wal", "0", orphan.Name)
	fmt.Println("a reader sees segment 3:", !errors.Is(err, writefence.ErrNotFound))

	_, err = ship(b, "node-b", "segment 4")
	fmt.Println("node-b ships segment 4:", err)

	report, _ := fence.Collect(ctx, "wal", "0", writefence.GCOptions{Grace: time.Hour})
	fmt.Printf("collected %d blob, kept %d referenced\n", len(report.Deleted), len(report.Referenced))

	info, _ := fence.Inspect(ctx, "wal", "0")
	for _, r := range info.Blobs {
		rc, _, _ := fence.OpenBlob(ctx, "wal", "0", r.Name)
		data, _ := io.ReadAll(rc)
		rc.Close()
		fmt.Printf("manifest: %s (%d bytes)\n", data, r.Size)
	}
	// Output:
	// node-a seals: <nil>
	// node-a ships segment 1: <nil>
	// node-a ships segment 2: <nil>
	// node-b holds term 2 and seals: <nil>
	// node-a's late commit refused: true
	// a reader sees segment 3: false
	// node-b ships segment 4: <nil>
	// collected 1 blob, kept 3 referenced
	// manifest: segment 1 (9 bytes)
	// manifest: segment 2 (9 bytes)
	// manifest: segment 4 (9 bytes)
}
