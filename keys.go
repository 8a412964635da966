package writefence

import (
	"errors"

	"github.com/writefence/writefence/internal/keys"
)

// The keys a Fence reads and writes are built in internal/keys: a shard's
// record at Prefix + "s/" + plugin + "/" + shard (names escaped, so the
// mapping is injective), the reserved keys (brand, leases, probe) at
// Prefix + "_" + name, so that no shard key is ever a reserved key.

// shardKey returns the key of (plugin, shard) under prefix; a rejected name
// is an *InvalidArgumentError.
func shardKey(prefix, plugin, shard string) (string, error) {
	k, err := keys.Shard(prefix, plugin, shard)
	return k, keyErr(err)
}

// keyErr turns a key limit's refusal into an *InvalidArgumentError.
func keyErr(err error) error {
	var ke *keys.Error
	if errors.As(err, &ke) {
		return &InvalidArgumentError{Arg: ke.Arg, Reason: ke.Reason}
	}
	return err
}

// Shard names a shard for Hold to seal.
type Shard struct {
	Plugin, Shard string
}
