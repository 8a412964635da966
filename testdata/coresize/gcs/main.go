// Command gcs is the core's program (see ../memstore) with the GCS
// adapter linked: it builds a store on a client that never dials.
package main

import (
	"context"
	"fmt"
	"log"

	"cloud.google.com/go/storage"
	"google.golang.org/api/option"

	"github.com/writefence/writefence"
)

func main() {
	c, err := storage.NewClient(context.Background(), option.WithoutAuthentication(), option.WithEndpoint("http://localhost:4443/storage/v1/"))
	if err != nil {
		log.Fatal(err)
	}
	f := &writefence.Fence{Store: writefence.NewGCSConditionalStore(c, "bucket", nil)}
	fmt.Printf("%T\n", f.Store)
}
