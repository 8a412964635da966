package writefence_test

import (
	"context"
	"errors"
	"fmt"

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
