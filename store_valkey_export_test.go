//go:build !writefence_novalkey && !writefence_nosdk

package writefence

import "github.com/redis/go-redis/v9"

// ValkeyStore is the Valkey adapter's own type, for the package's
// external tests.
type ValkeyStore = valkeyStore

func NewValkeyStore(client redis.UniversalClient) *ValkeyStore {
	return newValkeyStore(client, nil)
}
