// Command memstore uses writefence's Fence over a MemStore only: the
// program bench/core-size measures for the core's size.
package main

import (
	"context"
	"fmt"
	"log"

	"github.com/writefence/writefence"
)

func main() {
	ctx := context.Background()
	f := &writefence.Fence{Store: new(writefence.MemStore)}
	if err := f.Push(ctx, "wal", "0", "a", 1, []byte("hello")); err != nil {
		log.Fatal(err)
	}
	epoch, writer, payload, err := f.Latest(ctx, "wal", "0")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(epoch, writer, string(payload))
}
