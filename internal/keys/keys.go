// Package keys is the one place where the keys writefence reads and writes
// are built: a shard's record, and the reserved keys (the brand, leases,
// the probe's scratch keys). The command and the conformance kit use it to
// find records; it is not part of the public API.
//
// Key layout under a prefix P:
//
//	P + "s/" + escape(plugin) + "/" + escape(shard)          a shard's record
//	P + "b/" + escape(plugin) + "/" + escape(shard) + "/" + name   a shard's blob
//	P + "_brand"                                              the brand key
//	P + "_lease/" + escape(name)                              a lease record
//	P + "_probe"                                              the probe's scratch keys start with it
//	P + "_settled/" + escape(plugin) + "/" + escape(shard)   a shard's settle log
//	P + "_floor/" + escape(plugin) + "/" + escape(shard)     a shard's floor (Fence.KeepFloor)
//	P + "_clock/" + id                                        a blob that tells the blob store's time
//	"writefence/_wait"                                        the Valkey store's replication sync key
//	"writefence/_wait{" + SlotTag(s) + "}"                   the same, in cluster slot s (WaitIn)
//	"writefence/_put/{" + SlotTag(s) + "}" + token           a value the Valkey store stages (Staged)
//
// The first byte after the prefix is 's' for every shard key, 'b' for every
// blob key and '_' for every reserved key, so the three spaces are disjoint
// by construction. A blob's name is its epoch as 16 hexadecimal digits, a
// '-', an id of 32 hexadecimal digits (the time it was put, then random
// ones), a '-' and its writer escaped: it carries the epoch and the writer
// that wrote it, sorts among its epoch's in about the order they were
// put, and never repeats.
// escape keeps the bytes [A-Za-z0-9_-] and '.' (except at the start of a
// name, so no name becomes "." or ".."), and writes every other byte as %XX.
// An escaped name never contains '/', so a shard key splits back into
// exactly one (plugin, shard): the mapping is injective.
package keys

import (
	"fmt"
	"strconv"
	"strings"
)

// DefaultPrefix is the key prefix used when none is configured.
const DefaultPrefix = "writefence/"

// Limits on key parts.
const (
	MaxNameLen = 256  // bytes in a plugin, shard or lease name, before escaping
	MaxKeyLen  = 1024 // bytes in a whole key, as S3 and GCS allow
)

const (
	shardSpace = "s/"
	brandKey   = "_brand"
	leaseSpace = "_lease/"
	probeKey   = "_probe"
	settleLog  = "_settled/"
	floorSpace = "_floor/"
	blobSpace  = "b/"
	clockKey   = "_clock/"
)

// Error is a name or a key rejected by a limit: Arg names the argument.
type Error struct {
	Arg, Reason string
}

func (e *Error) Error() string { return e.Arg + ": " + e.Reason }

func prefixOrDefault(prefix string) string {
	if prefix == "" {
		return DefaultPrefix
	}
	return prefix
}

// Shard returns the key of the record for (plugin, shard) under prefix
// (DefaultPrefix when empty). Names must be 1 to MaxNameLen bytes; any
// bytes are allowed, escaped so that distinct pairs never share a key.
func Shard(prefix, plugin, shard string) (string, error) {
	return build(prefix, shardSpace, [2]string{"plugin", plugin}, [2]string{"shard", shard})
}

// Shards returns what every shard key under prefix starts with.
func Shards(prefix string) string { return prefixOrDefault(prefix) + shardSpace }

// ParseShard is the inverse of Shard under prefix: it returns the plugin
// and shard of key, and false for a key Shard never returns.
func ParseShard(prefix, key string) (plugin, shard string, ok bool) {
	rest, found := strings.CutPrefix(key, prefixOrDefault(prefix)+shardSpace)
	if !found {
		return "", "", false
	}
	p, s, found := strings.Cut(rest, "/")
	if !found {
		return "", "", false
	}
	plugin, okp := unescapeName(p)
	shard, oks := unescapeName(s)
	if !okp || !oks {
		return "", "", false
	}
	// The round trip rejects a key that is not in canonical form, e.g.
	// "%41" where Shard writes "A".
	if k, err := Shard(prefix, plugin, shard); err != nil || k != key {
		return "", "", false
	}
	return plugin, shard, true
}

// SettleLog returns the key of the settle log of (plugin, shard)'s record
// under prefix: what Fence.Settle writes before it replaces a corrupt
// record.
func SettleLog(prefix, plugin, shard string) (string, error) {
	return build(prefix, settleLog, [2]string{"plugin", plugin}, [2]string{"shard", shard})
}

// Floor returns the key of the floor of (plugin, shard) under prefix: what
// Fence.Seal and Fence.Settle raise under Fence.KeepFloor, apart from the
// record.
func Floor(prefix, plugin, shard string) (string, error) {
	return build(prefix, floorSpace, [2]string{"plugin", plugin}, [2]string{"shard", shard})
}

// Floors returns what every floor key under prefix starts with.
func Floors(prefix string) string { return prefixOrDefault(prefix) + floorSpace }

// Blobs returns what the keys of (plugin, shard)'s blobs under prefix start
// with: a blob's key is that followed by its name.
func Blobs(prefix, plugin, shard string) (string, error) {
	k, err := build(prefix, blobSpace, [2]string{"plugin", plugin}, [2]string{"shard", shard})
	if err != nil {
		return "", err
	}
	// Room for a name with a one-byte writer.
	if _, err := checkKey(k + "/" + strings.Repeat("x", blobNameFixed+1)); err != nil {
		return "", err
	}
	return k + "/", nil
}

// Blob returns the key of the blob name of (plugin, shard) under prefix.
func Blob(prefix, plugin, shard, name string) (string, error) {
	space, err := Blobs(prefix, plugin, shard)
	if err != nil {
		return "", err
	}
	if _, _, _, ok := ParseBlobName(name); !ok {
		return "", &Error{Arg: "name", Reason: "not a blob name"}
	}
	return checkKey(space + name)
}

// blobNameFixed is the length of a blob name but its writer.
const blobNameFixed = 16 + 1 + 32 + 1

// BlobName returns the name of a blob written at epoch by writer, with the
// id (32 lower-case hexadecimal digits).
func BlobName(epoch uint64, writer, id string) string {
	var b strings.Builder
	b.Grow(blobNameFixed + len(writer))
	b.Write(epochPrefix(epoch))
	b.WriteString(id)
	b.WriteByte('-')
	escapeName(&b, writer)
	return b.String()
}

// BlobEpochPrefix is what the names of the blobs written at epoch start
// with: a blob space's key prefix plus it lists exactly those blobs.
func BlobEpochPrefix(epoch uint64) string { return string(epochPrefix(epoch)) }

// epochPrefix is epoch in 16 lower-case hexadecimal digits and a '-'.
func epochPrefix(epoch uint64) []byte {
	b := make([]byte, 17)
	for i := 15; i >= 0; i-- {
		b[i] = "0123456789abcdef"[epoch&0xf]
		epoch >>= 4
	}
	b[16] = '-'
	return b
}

// ParseBlobName is the inverse of BlobName: the epoch, id and writer of a
// blob's name, and false for a name BlobName never returns.
func ParseBlobName(name string) (epoch uint64, id, writer string, ok bool) {
	if len(name) <= blobNameFixed || name[16] != '-' || name[49] != '-' {
		return 0, "", "", false
	}
	if !IsLowerHex(name[:16]) || !IsLowerHex(name[17:49]) {
		return 0, "", "", false
	}
	epoch, err := strconv.ParseUint(name[:16], 16, 64)
	if err != nil {
		return 0, "", "", false
	}
	writer, ok = unescapeName(name[50:])
	if !ok || writer == "" || !canonical(name[50:]) {
		return 0, "", "", false
	}
	return epoch, name[17:49], writer, true
}

// canonical reports whether s is what escapeName writes of the name it
// unescapes to: every byte escapeName keeps is kept, every other escaped.
func canonical(s string) bool {
	for i, n := 0, 0; i < len(s); i, n = i+1, n+1 {
		c := s[i]
		if c == '%' {
			if i+2 >= len(s) {
				return false
			}
			hi, lo := strings.IndexByte(hexDigits, s[i+1]), strings.IndexByte(hexDigits, s[i+2])
			if hi < 0 || lo < 0 {
				return false
			}
			c, i = byte(hi<<4|lo), i+2
			if keepByte(c) || c == '.' && n > 0 {
				return false
			}
		} else if !keepByte(c) && !(c == '.' && n > 0) {
			return false
		}
	}
	return true
}

// IsLowerHex reports whether s holds only the digits 0-9 and a-f, the
// form of a blob id and of the stores' version tokens.
func IsLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if !('0' <= s[i] && s[i] <= '9' || 'a' <= s[i] && s[i] <= 'f') {
			return false
		}
	}
	return true
}

// Clock returns a key in the reserved space under prefix for a blob that
// tells a blob store's time, with the random id.
func Clock(prefix, id string) string { return prefixOrDefault(prefix) + clockKey + id }

// Brand returns the brand key under prefix (DefaultPrefix when empty).
func Brand(prefix string) string { return prefixOrDefault(prefix) + brandKey }

// Lease returns the key of the lease record named name under prefix.
func Lease(prefix, name string) (string, error) {
	return build(prefix, leaseSpace, [2]string{"name", name})
}

// build checks each {argument, name} and returns prefix + space + the
// escaped names joined by '/', within MaxKeyLen.
func build(prefix, space string, names ...[2]string) (string, error) {
	var b strings.Builder
	b.WriteString(prefixOrDefault(prefix))
	b.WriteString(space)
	for i, n := range names {
		if err := checkName(n[0], n[1]); err != nil {
			return "", err
		}
		if i > 0 {
			b.WriteByte('/')
		}
		escapeName(&b, n[1])
	}
	return checkKey(b.String())
}

// Wait is the key the Valkey store writes to make a read's replication
// wait meaningful, in the reserved space of DefaultPrefix.
const Wait = DefaultPrefix + "_wait"

// Probe returns the key under prefix the probe's scratch keys start with.
func Probe(prefix string) string { return prefixOrDefault(prefix) + probeKey }

func checkName(arg, name string) error {
	switch {
	case name == "":
		return &Error{Arg: arg, Reason: "empty"}
	case len(name) > MaxNameLen:
		return &Error{Arg: arg, Reason: fmt.Sprintf("%d bytes, more than %d", len(name), MaxNameLen)}
	}
	return nil
}

func checkKey(k string) (string, error) {
	if len(k) > MaxKeyLen {
		return "", &Error{Arg: "key", Reason: fmt.Sprintf("escaped key is %d bytes, more than %d", len(k), MaxKeyLen)}
	}
	return k, nil
}

const hexDigits = "0123456789ABCDEF"

func escapeName(b *strings.Builder, name string) {
	for i := 0; i < len(name); i++ {
		c := name[i]
		if keepByte(c) || (c == '.' && i > 0) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hexDigits[c>>4])
		b.WriteByte(hexDigits[c&0xf])
	}
}

func unescapeName(s string) (string, bool) {
	var b []byte
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b = append(b, s[i])
			continue
		}
		if i+2 >= len(s) {
			return "", false
		}
		hi, lo := strings.IndexByte(hexDigits, s[i+1]), strings.IndexByte(hexDigits, s[i+2])
		if hi < 0 || lo < 0 {
			return "", false
		}
		b = append(b, byte(hi<<4|lo))
		i += 2
	}
	return string(b), true
}

func keepByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_'
}

// CheckPrefix validates a key prefix: empty (DefaultPrefix), or one that
// ends in "/" none of whose segments is empty, "s" or "b", or starts with
// "_".
// So no prefix reaches into another's spaces: a prefix that extends
// another one by whole segments would begin with one of its shard, blob or
// reserved spaces ("p/s/…", "p/b/…", "p/_…"), and is refused; one that
// does not end in "/" would make its spaces begin inside a segment
// ("ps/…" under "p").
func CheckPrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	if !strings.HasSuffix(prefix, "/") {
		return &Error{Arg: "prefix", Reason: fmt.Sprintf("%q does not end in \"/\"", prefix)}
	}
	for _, seg := range strings.Split(strings.TrimSuffix(prefix, "/"), "/") {
		switch {
		case seg == "":
			return &Error{Arg: "prefix", Reason: fmt.Sprintf("%q has an empty segment", prefix)}
		case seg == strings.TrimSuffix(shardSpace, "/"), seg == strings.TrimSuffix(blobSpace, "/"):
			return &Error{Arg: "prefix", Reason: fmt.Sprintf("%q has a segment %q, which names a space of another prefix's keys: a Fence under it would share keys with the Fence under the prefix before it", prefix, seg)}
		case strings.HasPrefix(seg, "_"):
			return &Error{Arg: "prefix", Reason: fmt.Sprintf("%q has a segment %q, which starts like a reserved key of another prefix", prefix, seg)}
		}
	}
	return nil
}
