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

// A failover behind ZooKeeper leader election: node-a leads and writes;
// node-b's campaign waits until node-a resigns, then node-b seals the
// shard and writes, and node-a draws no more epochs. Each candidate has a
// session of its own, as each process would. zkEndpoint is the ZooKeeper
// server to use.
func Example() {
	ctx := context.Background()
	var conns []*zk.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	candidate := func() (*zkepoch.Election, error) {
		conn, _, err := zk.Connect([]string{zkEndpoint}, 10*time.Second, zk.WithLogInfo(false))
		if err != nil {
			return nil, err
		}
		conns = append(conns, conn)
		return zkepoch.NewElection(conn, "/example/wal-writer"), nil
	}
	a, err := candidate()
	if err != nil {
		fmt.Println("connect:", err)
		return
	}
	b, err := candidate()
	if err != nil {
		fmt.Println("connect:", err)
		return
	}

	fence := &writefence.Fence{Store: &writefence.MemStore{}}
	// lead seals the shard for a new leader, then pushes a segment.
	lead := func(leader *zkepoch.Election, name, segment string) error {
		seal, err := leader.Epoch(ctx, "wal", "0")
		if err != nil {
			return err
		}
		if err := fence.Seal(ctx, "wal", "0", name, seal); err != nil {
			return err
		}
		_, err = fence.PushFrom(ctx, leader, "wal", "0", name, []byte(segment))
		return err
	}

	if err := a.Campaign(ctx, "node-a"); err != nil {
		fmt.Println("campaign:", err)
		return
	}
	fmt.Println("node-a leads:", lead(a, "node-a", "segment 1"))

	bLeads := make(chan error, 1)
	go func() { bLeads <- b.Campaign(ctx, "node-b") }()
	if err := a.Resign(ctx); err != nil {
		fmt.Println("resign:", err)
		return
	}
	if err := <-bLeads; err != nil {
		fmt.Println("campaign:", err)
		return
	}
	fmt.Println("node-b leads:", lead(b, "node-b", "segment 2"))

	_, err = fence.PushFrom(ctx, a, "wal", "0", "node-a", []byte("segment 3"))
	fmt.Println("node-a's push refused:", errors.Is(err, zkepoch.ErrNotLeader))
	if err := b.Resign(ctx); err != nil {
		fmt.Println("resign:", err)
		return
	}

	_, writer, payload, _ := fence.Latest(ctx, "wal", "0")
	fmt.Printf("shard 0: %s by %s\n", payload, writer)
	// Output:
	// node-a leads: <nil>
	// node-b leads: <nil>
	// node-a's push refused: true
	// shard 0: segment 2 by node-b
}
