//go:build !writefence_novalkey && !writefence_nosdk

package writefence

import "github.com/redis/go-redis/v9"

// ValkeyStore is the Valkey adapter's own type, for the package's
// external tests.
type ValkeyStore = valkeyStore

func NewValkeyStore(client redis.UniversalClient) *ValkeyStore {
	return newValkeyStore(client, nil)
}

// ValkeyScriptStages reports whether the Script path stages a value of n
// bytes of data beside the script's call rather than sending it in it.
func ValkeyScriptStages(n int) bool { return valkeyHeaderLen+n > valkeyInlineMax }
