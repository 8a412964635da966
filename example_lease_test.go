package writefence_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/writefence/writefence"
)

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
		return &writefence.Lease{Store: store, Name: "wal/0", Holder: holder, TTL: 10 * time.Second, Clock: clock}
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
	// node-b: writefence: lease writefence/_lease/wal%2F0 held by node-a at term 1 until 2030-01-01T00:00:12Z
	// node-b holds term 2
	// node-a late push refused: true
	// node-a renew: writefence: lease writefence/_lease/wal%2F0: term 1: now held by node-b at term 2: writefence: lease lost
	// recorded: term 2 by node-b: segment 3
}
