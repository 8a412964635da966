//go:build !writefence_novalkey && !writefence_nosdk

package writefence_test

import (
	"context"
	"errors"
	"log"

	"github.com/redis/go-redis/v9"

	"github.com/writefence/writefence"
)

// A Fence over a standalone Valkey server. The store refuses a
// cluster-enabled server before touching a key.
func ExampleNewValkeyConditionalStore() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()

	// Script: one round trip per write instead of two.
	store := writefence.NewValkeyConditionalStore(client, &writefence.StoreOptions{Script: true})
	fence := &writefence.Fence{Store: store}

	ctx := context.Background()
	err := fence.Push(ctx, "wal", "shard-7", "node-a", 42, []byte("segment 1138"))
	switch {
	case errors.Is(err, writefence.ErrStaleEpoch):
		log.Print("deposed: a push at epoch 42 or later already landed")
	case errors.Is(err, errors.ErrUnsupported):
		log.Fatal(err) // a cluster: configuration, not a race
	case err != nil:
		log.Print(err)
	}
}
