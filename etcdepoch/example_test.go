package etcdepoch_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/etcdepoch"
)

// A writer gated behind etcd leader election: campaign, seal the shards
// the new leader will write, push with epochs minted while etcd confirms
// the leadership, resign. etcdEndpoint is the etcd server to use.
func Example() {
	ctx := context.Background()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{etcdEndpoint}, DialTimeout: 5 * time.Second})
	if err != nil {
		fmt.Println("client:", err)
		return
	}
	defer cli.Close()
	session, err := concurrency.NewSession(cli, concurrency.WithTTL(10))
	if err != nil {
		fmt.Println("session:", err)
		return
	}
	defer session.Close()

	fence := &writefence.Fence{Store: &writefence.MemStore{}}
	leader := etcdepoch.NewElection(session, "/example/wal-writer")
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
	fmt.Println("push after resigning refused:", errors.Is(err, etcdepoch.ErrNotLeader))

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
