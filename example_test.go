package writefence_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/writefence/writefence"
)

func ExampleFence_Push() {
	ctx := context.Background()
	fence := &writefence.Fence{Store: &writefence.MemStore{}}

	// The leader at epoch 7 ships a WAL segment.
	if err := fence.Push(ctx, "wal", "shard-0", "node-a", 7, []byte("segment 0042")); err != nil {
		fmt.Println("push:", err)
	}

	// A deposed leader, still believing it holds epoch 6, is refused
	// before it writes anything.
	err := fence.Push(ctx, "wal", "shard-0", "node-b", 6, []byte("segment 0041"))
	var stale *writefence.StaleEpochError
	if errors.As(err, &stale) {
		fmt.Printf("refused: epoch %d is recorded, by %s\n", stale.RecordedEpoch, stale.RecordedWriter)
	}

	epoch, writer, payload, _ := fence.Latest(ctx, "wal", "shard-0")
	fmt.Printf("recorded: epoch %d by %s: %s\n", epoch, writer, payload)
	// Output:
	// refused: epoch 7 is recorded, by node-a
	// recorded: epoch 7 by node-a: segment 0042
}

// A manifest kept under the fence: each writer appends the segment it
// shipped, at its epoch; a deposed writer's update is refused before next
// runs on anything.
func ExampleFence_Update() {
	ctx := context.Background()
	fence := &writefence.Fence{Store: &writefence.MemStore{}}
	add := func(segment string) func([]byte) ([]byte, error) {
		return func(manifest []byte) ([]byte, error) {
			if bytes.Contains(manifest, []byte(segment+"\n")) {
				return manifest, nil // already listed: idempotent, so a retry is safe
			}
			return append(manifest, segment+"\n"...), nil
		}
	}
	fmt.Println(fence.Update(ctx, "wal", "shard-0", "node-a", 7, add("seg-0001")))
	fmt.Println(fence.Update(ctx, "wal", "shard-0", "node-a", 8, add("seg-0002")))
	err := fence.Update(ctx, "wal", "shard-0", "node-b", 6, add("seg-0000"))
	fmt.Println("stale:", errors.Is(err, writefence.ErrStaleEpoch))

	epoch, writer, manifest, _ := fence.Latest(ctx, "wal", "shard-0")
	fmt.Printf("epoch %d by %s:\n%s", epoch, writer, manifest)
	// Output:
	// <nil>
	// <nil>
	// stale: true
	// epoch 8 by node-a:
	// seg-0001
	// seg-0002
}

func ExampleFence_PushFrom() {
	ctx := context.Background()
	fence := &writefence.Fence{Store: &writefence.MemStore{}}

	// The control plane handed this process epoch 3 for every shard.
	lease := writefence.StaticEpochSource(3)
	epoch, err := fence.PushFrom(ctx, lease, "snapshots", "shard-9", "node-c", []byte("snapshot"))
	fmt.Println(epoch, err)
	// Output:
	// 3 <nil>
}

// A store is branded once by a deploy step; writers of the same format
// verify the brand before their first push, and a program of another format
// is refused before it writes anything.
func ExampleFence_ClaimBrand() {
	ctx := context.Background()
	store := &writefence.MemStore{}

	// The deploy step. Installing again writes nothing.
	admin := &writefence.Fence{Store: store, Identity: "wal-mirror/v1"}
	installed, err := admin.ClaimBrand(ctx)
	fmt.Println("installed:", installed, err)
	installed, err = admin.ClaimBrand(ctx)
	fmt.Println("installed again:", installed, err)

	// A writer of the format: verifies once, then pushes.
	fence := &writefence.Fence{
		Store:    store,
		Identity: "wal-mirror/v1",
		Brand:    writefence.BrandVerify,
	}
	fmt.Println("push:", fence.Push(ctx, "wal", "shard-7", "node-a", 1, []byte("segment 1")))

	// A program of another format claims the store at start-up.
	other := &writefence.Fence{Store: store, Identity: "wal-mirror/v2"}
	_, err = other.ClaimBrand(ctx)
	fmt.Println("wire refusal:", errors.Is(err, writefence.ErrWire))
	fmt.Println(err)
	// Output:
	// installed: true <nil>
	// installed again: false <nil>
	// push: <nil>
	// wire refusal: true
	// writefence: wire: expected wal-mirror/v2 found wal-mirror/v1
}

// A Fence that claims its store before its first push: the first writer to
// start brands an empty store, later ones accept the brand.
func ExampleBrandMode() {
	ctx := context.Background()
	store := &writefence.MemStore{}
	fence := &writefence.Fence{
		Store: store,
		Brand: writefence.BrandClaim,
	}
	fmt.Println(fence.Push(ctx, "wal", "shard-7", "node-a", 1, []byte("segment 1")))
	fmt.Println((&writefence.Fence{Store: store}).VerifyBrand(ctx))

	fresh := &writefence.Fence{Store: &writefence.MemStore{}, Brand: writefence.BrandVerify}
	fmt.Println(fresh.Push(ctx, "wal", "shard-7", "node-a", 1, []byte("segment 1")))
	// Output:
	// <nil>
	// <nil>
	// writefence: wire: expected writefence/v1 but writefence/_brand is absent
}

// A writer loop gated behind a lease. Two nodes share one store: node-a
// takes the lease, seals the shard and ships segments, renewing as it goes;
// it then stalls past its TTL, node-b takes over, seals, and node-a's late
// push is refused by the store itself. A fake clock stands in for time.
func ExampleLease() {
	ctx := context.Background()
	store := &writefence.MemStore{}
	fence := &writefence.Fence{Store: store}

	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	newLease := func(holder string) *writefence.Lease {
		return &writefence.Lease{Fence: fence, Name: "wal/0", Holder: holder, TTL: 10 * time.Second, Clock: clock}
	}

	// node-a: acquire, seal, then ship while renewing.
	a := newLease("node-a")
	term, err := a.Acquire(ctx)
	if err != nil {
		fmt.Println("acquire:", err)
		return
	}
	fmt.Println("node-a holds term", term)
	seal, _ := a.Epoch(ctx, "wal", "0")
	if err := fence.Seal(ctx, "wal", "0", "node-a", seal); err != nil {
		fmt.Println("seal:", err)
		return
	}
	for i := 1; i <= 3; i++ {
		if err := a.Renew(ctx); err != nil {
			fmt.Println("renew:", err)
			return
		}
		epoch, err := fence.PushFrom(ctx, a, "wal", "0", "node-a", fmt.Appendf(nil, "segment %d", i))
		fmt.Printf("node-a pushed segment %d at term %d: %v\n", i, epoch>>32, err)
		now = now.Add(time.Second)
	}

	// node-a draws an epoch, then stalls; node-b cannot take over until the
	// lease expires.
	late, _ := a.Epoch(ctx, "wal", "0")
	b := newLease("node-b")
	if _, err := b.Acquire(ctx); errors.Is(err, writefence.ErrLeaseHeld) {
		fmt.Println("node-b:", err)
	}
	now = now.Add(15 * time.Second)
	term, _ = b.Acquire(ctx)
	fmt.Println("node-b holds term", term)
	seal, _ = b.Epoch(ctx, "wal", "0")
	if err := fence.Seal(ctx, "wal", "0", "node-b", seal); err != nil {
		fmt.Println("seal:", err)
		return
	}

	// node-a wakes up and pushes with the epoch it drew before the stall.
	err = fence.Push(ctx, "wal", "0", "node-a", late, []byte("segment 4"))
	fmt.Println("node-a late push refused:", errors.Is(err, writefence.ErrStaleEpoch))
	fmt.Println("node-a renew:", a.Renew(ctx))

	epoch, writer, payload, _ := fence.Latest(ctx, "wal", "0")
	fmt.Printf("recorded: term %d by %s: %s\n", epoch>>32, writer, payload)
	// Output:
	// node-a holds term 1
	// node-a pushed segment 1 at term 1: <nil>
	// node-a pushed segment 2 at term 1: <nil>
	// node-a pushed segment 3 at term 1: <nil>
	// node-b: writefence: lease wal/0 held by node-a at term 1 until 2030-01-01T00:00:12Z
	// node-b holds term 2
	// node-a late push refused: true
	// node-a renew: writefence: lease wal/0: term 1: taken over by node-b at term 2: writefence: lease lost
	// recorded: term 2 by node-b: segment 3
}
