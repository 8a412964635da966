// Command valkey is the core's program (see ../memstore) with the Valkey
// adapter linked: it builds a store on a client that never dials.
package main

import (
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/writefence/writefence"
)

func main() {
	c := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	f := &writefence.Fence{Store: writefence.NewValkeyConditionalStore(c, nil)}
	fmt.Printf("%T\n", f.Store)
}
