package keys

import "strings"

// Leases returns what every lease key under prefix starts with.
func Leases(prefix string) string { return prefixOrDefault(prefix) + leaseSpace }

// ParseLease is the inverse of Lease under prefix: the name of the lease
// whose record is at key, and false for a key Lease never returns.
func ParseLease(prefix, key string) (name string, ok bool) {
	rest, found := strings.CutPrefix(key, Leases(prefix))
	if !found {
		return "", false
	}
	name, ok = unescapeName(rest)
	if !ok {
		return "", false
	}
	if k, err := Lease(prefix, name); err != nil || k != key {
		return "", false
	}
	return name, true
}

// AllBlobs returns what the key of every blob of every shard under prefix
// starts with.
func AllBlobs(prefix string) string { return prefixOrDefault(prefix) + blobSpace }

// ParseBlob is the inverse of Blob under prefix: the plugin, shard and
// name of the blob at key, and false for a key Blob never returns.
func ParseBlob(prefix, key string) (plugin, shard, name string, ok bool) {
	rest, found := strings.CutPrefix(key, AllBlobs(prefix))
	if !found {
		return "", "", "", false
	}
	p, rest, found := strings.Cut(rest, "/")
	if !found {
		return "", "", "", false
	}
	s, name, found := strings.Cut(rest, "/")
	if !found {
		return "", "", "", false
	}
	plugin, okp := unescapeName(p)
	shard, oks := unescapeName(s)
	if !okp || !oks {
		return "", "", "", false
	}
	if k, err := Blob(prefix, plugin, shard, name); err != nil || k != key {
		return "", "", "", false
	}
	return plugin, shard, name, true
}
