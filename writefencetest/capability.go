package writefencetest

import (
	"reflect"
	"testing"

	"github.com/writefence/writefence"
)

// The kit reaches a store's optional capabilities only through the helpers
// a Fence uses (writefence.GetPrefix, writefence.PutParts,
// writefence.PutIfBranded), so the method it checks is the method a Fence
// on that store runs. declared tells which one that is, to say so in the
// log; it follows the rule of writefence.Capable.

// declared reports whether s declares its capability C as its own, so
// that the writefence helper for C calls s's method rather than falling
// back to Get and PutIfVersion; has reports whether s has the method at
// all.
func declared[C any](s writefence.ConditionalStore) (ok, has bool) {
	if _, has = s.(C); !has {
		return false, false
	}
	c, isCapable := s.(writefence.Capable)
	if !isCapable {
		return false, true
	}
	own := c.Capabilities()
	if own == nil {
		return false, true
	}
	typ := reflect.TypeOf(s)
	return reflect.TypeOf(own) == typ && typ.Comparable() && own == s, true
}

// capabilityPaths names, for each helper, the store's own method it calls
// and what it falls back to.
var capabilityPaths = map[string]struct {
	resolve          func(writefence.ConditionalStore) (bool, bool)
	iface, own, fall string
}{
	"GetPrefix": {declared[writefence.PrefixReader], "writefence.PrefixReader", "its GetPrefix", "Get"},
	"PutParts":  {declared[writefence.PartsPutter], "writefence.PartsPutter", "its PutPartsIfVersion", "PutIfVersion of the joined parts"},
	"PutIfBranded": {declared[writefence.BrandedPutter], "writefence.BrandedPutter", "its PutIfBranded",
		"Get of the brand key, then writefence.PutParts (a re-brand between the two goes unseen)"},
	"DeleteBlobs": {declared[writefence.BlobBatchDeleter], "writefence.BlobBatchDeleter", "its DeleteBlobs", "DeleteBlob of each key"},
	"WriteBlob":   {declared[writefence.BlobWriter], "writefence.BlobWriter", "its WriteBlob", "CreateBlob"},
	"StatBlobs": {declared[writefence.ConsistentBlobLister], "writefence.ConsistentBlobLister",
		"its ListBlobsConsistent, then StatBlob of each key the listing did not show", "StatBlob of each key"},
}

// logPaths logs which method of the store each named helper calls.
func logPaths(t *testing.T, sc *scope, helpers ...string) {
	t.Helper()
	for _, h := range helpers {
		p := capabilityPaths[h]
		switch own, has := p.resolve(sc.s); {
		case own:
			t.Logf("writefence.%s on this store calls %s: the store declares %s as its own (writefence.Capable)", h, p.own, p.iface)
		case has:
			t.Logf("writefence.%s on this store falls back to %s: the store implements %s but does not declare it as its own (writefence.Capable), so a Fence does not use it either", h, p.fall, p.iface)
		default:
			t.Logf("writefence.%s on this store falls back to %s: the store does not implement %s", h, p.fall, p.iface)
		}
	}
}
