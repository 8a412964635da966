// Command minio is the core's program (see ../memstore) with the MinIO
// adapter linked: it builds a store on a client that never dials.
package main

import (
	"fmt"
	"log"

	"github.com/minio/minio-go/v7"

	"github.com/writefence/writefence"
)

func main() {
	c, err := minio.New("localhost:9000", &minio.Options{})
	if err != nil {
		log.Fatal(err)
	}
	f := &writefence.Fence{Store: writefence.NewMinioConditionalStore(c, "bucket", nil)}
	fmt.Printf("%T\n", f.Store)
}
