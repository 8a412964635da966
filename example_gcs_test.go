//go:build !writefence_nogcs && !writefence_nosdk

package writefence_test

import (
	"context"
	"errors"
	"log"
	"net/http"

	"cloud.google.com/go/storage"
	"google.golang.org/api/googleapi"

	"github.com/writefence/writefence"
)

// ExampleNewGCSConditionalStore fences pushes to a Cloud Storage bucket. It
// needs credentials and a bucket, so it is compiled but not run.
func ExampleNewGCSConditionalStore() {
	ctx := context.Background()
	client, err := storage.NewClient(ctx) // application default credentials
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	fence := &writefence.Fence{Store: writefence.NewGCSConditionalStore(client, "my-mirror-bucket", nil)}

	// epoch comes from whatever elects this node the shard's writer.
	var epoch uint64 = 42
	err = fence.Push(ctx, "wal", "shard-7", "node-a", epoch, []byte("segment bytes"))
	var gerr *googleapi.Error
	switch {
	case err == nil:
		log.Print("pushed")
	case errors.Is(err, writefence.ErrStaleEpoch):
		log.Print("deposed: a writer with this epoch or a later one has pushed; stop writing")
	case errors.As(err, &gerr) && gerr.Code == http.StatusTooManyRequests:
		log.Print("throttled: Cloud Storage takes about one update per second per object; retry later")
	default:
		log.Fatal(err)
	}
}
