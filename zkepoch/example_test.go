package zkepoch_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/zkepoch"
)

// A writer gated behind ZooKeeper leader election: campaign, seal the
// shards the new leader will write, push with epochs minted while
// ZooKeeper confirms the leadership, resign. zkEndpoint is the ZooKeeper
// server to use.
func Example() {
	ctx := context.Background()
	conn, _, err := zk.Connect([]string{zkEndpoint}, 10*time.Second, zk.WithLogInfo(false))
	if err != nil {
		fmt.Println("connect:", err)
		return
	}
	defer conn.Close()

	fence := &writefence.Fence{Store: &writefence.MemStore{}}
	leader := zkepoch.NewElection(conn, "/example/wal-writer")
	if err := leader.Campaign(ctx, "node-a"); err != nil {
		fmt.Println("campaign:", err)
		return
	}
	fmt.Println("node-a leads")

	// Seal first: from here on, a deposed leader's pushes are refused.
	for _, shard := range []string{"0", "1"} {
		seal, err := leader.Epoch(ctx, "wal", shard)
		if err != nil {
			fmt.Println("epoch:", err)
			return
		}
		if err := fence.Seal(ctx, "wal", shard, "node-a", seal); err != nil {
			fmt.Println("seal:", err)
			return
		}
	}
	for i, shard := range []string{"0", "1", "0"} {
		_, err := fence.PushFrom(ctx, leader, "wal", shard, "node-a", fmt.Appendf(nil, "segment %d", i+1))
		fmt.Printf("pushed segment %d to shard %s: %v\n", i+1, shard, err)
	}

	if err := leader.Resign(ctx); err != nil {
		fmt.Println("resign:", err)
		return
	}
	_, err = fence.PushFrom(ctx, leader, "wal", "0", "node-a", []byte("segment 4"))
	fmt.Println("push after resigning refused:", errors.Is(err, zkepoch.ErrNotLeader))

	_, writer, payload, _ := fence.Latest(ctx, "wal", "0")
	fmt.Printf("shard 0: %s by %s\n", payload, writer)
	// Output:
	// node-a leads
	// pushed segment 1 to shard 0: <nil>
	// pushed segment 2 to shard 1: <nil>
	// pushed segment 3 to shard 0: <nil>
	// push after resigning refused: true
	// shard 0: segment 3 by node-a
}
