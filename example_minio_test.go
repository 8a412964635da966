//go:build !writefence_nominio && !writefence_nosdk

package writefence_test

import (
	"context"
	"errors"
	"log"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/writefence/writefence"
)

// The example needs an S3 server, so it is compiled but not run.
func ExampleNewMinioConditionalStore() {
	client, err := minio.New("s3.example.com", &minio.Options{
		Creds:  credentials.NewEnvAWS(),
		Secure: true,
	})
	if err != nil {
		log.Fatal(err)
	}
	fence := &writefence.Fence{Store: writefence.NewMinioConditionalStore(client, "mirrors", nil)}

	// epoch comes from whatever elects this process as the shard's writer.
	var epoch uint64 = 7
	err = fence.Push(context.Background(), "wal", "shard-0001", "node-a", epoch, []byte("segment"))
	switch {
	case errors.Is(err, writefence.ErrStaleEpoch):
		log.Print("deposed: a newer writer owns the shard")
	case err != nil:
		log.Fatal(err)
	}
}
