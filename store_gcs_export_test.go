//go:build !writefence_nogcs && !writefence_nosdk

package writefence

import "cloud.google.com/go/storage"

// GCSStore is the GCS adapter's own type, for the package's external
// tests.
type GCSStore = gcsStore

func NewGCSStore(client *storage.Client, bucket string) *GCSStore {
	return newGCSStore(client, bucket, nil)
}
