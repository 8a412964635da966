package writefence

import "strings"

// DefaultPrefix is the key prefix a Fence uses when Fence.Prefix is empty.
const DefaultPrefix = "writefence/"

// Key layout under a prefix P:
//
//	P + "s/" + escape(plugin) + "/" + escape(shard)   a shard's record
//	P + "_" + name                                     the reserved space
//
// The first byte after the prefix is 's' for every shard key and '_' for
// every reserved key, so the two spaces are disjoint by construction.
// escape keeps the bytes [A-Za-z0-9_-] and '.' (except at the start of a
// name, so no name becomes "." or ".."), and writes every other byte as %XX.
// An escaped name never contains '/', so the key splits back into exactly
// one (plugin, shard): the mapping is injective.
const (
	shardSpace    = "s/"
	reservedSpace = "_"
	brandName     = "brand"
)

// Limits on key parts.
const (
	MaxNameLen = 256  // bytes in a plugin or shard name, before escaping
	MaxKeyLen  = 1024 // bytes in a whole key, as S3 and GCS allow
)

// ShardKey returns the key of the record for (plugin, shard) under prefix
// (DefaultPrefix when prefix is empty). Names must be 1 to MaxNameLen bytes;
// any bytes are allowed, escaped so that distinct (plugin, shard) pairs never
// share a key and no shard key falls in the reserved space. An invalid name
// or a key longer than MaxKeyLen returns an *InvalidArgumentError.
func ShardKey(prefix, plugin, shard string) (string, error) {
	if err := checkName("plugin", plugin); err != nil {
		return "", err
	}
	if err := checkName("shard", shard); err != nil {
		return "", err
	}
	prefix = orDefault(prefix, DefaultPrefix)
	var b strings.Builder
	b.Grow(len(prefix) + len(shardSpace) + 3*(len(plugin)+len(shard)) + 1)
	b.WriteString(prefix)
	b.WriteString(shardSpace)
	escapeName(&b, plugin)
	b.WriteByte('/')
	escapeName(&b, shard)
	if b.Len() > MaxKeyLen {
		return "", invalidArg("key", "escaped key is %d bytes, more than %d", b.Len(), MaxKeyLen)
	}
	return b.String(), nil
}

// BrandKey returns the reserved key that holds a store's wire identity under
// prefix (DefaultPrefix when prefix is empty). No ShardKey is ever equal to it.
func BrandKey(prefix string) string {
	return orDefault(prefix, DefaultPrefix) + reservedSpace + brandName
}

func checkName(arg, name string) error {
	switch {
	case name == "":
		return invalidArg(arg, "empty")
	case len(name) > MaxNameLen:
		return invalidArg(arg, "%d bytes, more than %d", len(name), MaxNameLen)
	}
	return nil
}

func escapeName(b *strings.Builder, name string) {
	const hex = "0123456789ABCDEF"
	for i := 0; i < len(name); i++ {
		c := name[i]
		if keepByte(c) || (c == '.' && i > 0) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&0xf])
	}
}

func keepByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_'
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
