package writefence_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/writefence/writefence"
)

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
