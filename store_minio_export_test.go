//go:build !writefence_nominio && !writefence_nosdk

package writefence

import "github.com/minio/minio-go/v7"

// MinioStore is the S3 adapter's own type, for the package's external
// tests, which build a store and then change its settings or call the
// methods its capabilities name.
type MinioStore = minioStore

func NewMinioStore(client *minio.Client, bucket string) *MinioStore {
	return newMinioStore(client, bucket, nil)
}
