package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/escape"
	"github.com/writefence/writefence/internal/keys"
)

// recordInfo is what one read of a shard's record shows.
type recordInfo struct {
	Key      string    `json:"key"`
	Version  string    `json:"version"`
	Epoch    uint64    `json:"epoch"`
	Writer   string    `json:"writer"`
	Identity string    `json:"identity"`
	Size     int       `json:"size"`            // payload bytes
	Since    uint64    `json:"since"`           // the tenure floor (see writefence.Fence.Commit)
	Blobs    []blobRef `json:"blobs,omitempty"` // the blobs the record references
	// BlobBytes is the blobs' size together.
	BlobBytes int64 `json:"blob_bytes"`
	payload   []byte
}

// inspect describes the record of (plugin, shard) with Fence.Inspect: one
// read, the version of exactly the bytes decoded, and as much as the read
// allowed alongside an ErrNotFound, ErrCorrupt or ErrWire.
func inspect(ctx context.Context, store writefence.ConditionalStore, prefix, identity, plugin, shard string) (recordInfo, error) {
	f := &writefence.Fence{Store: store, Prefix: prefix, Identity: identity}
	ri, err := f.Inspect(ctx, plugin, shard)
	info := recordInfo{Key: ri.Key, Version: ri.Version, Epoch: ri.Epoch, Writer: ri.Writer,
		Identity: ri.Identity, Size: len(ri.Payload), Since: ri.Since, payload: ri.Payload}
	for _, r := range ri.Blobs {
		info.Blobs = append(info.Blobs, newBlobRef(r))
		info.BlobBytes += r.Size
	}
	return info, err
}

// formatSize is n bytes for a summary line.
func formatSize(n int64) string { return strconv.FormatInt(n, 10) + " bytes" }

// blobRef is a blob reference as the command shows it: its parts, and
// the one-word form (ref) that blob put prints and commit -add takes.
type blobRef struct {
	Name string `json:"name"`
	Size int64  `json:"size"`
	CRC  string `json:"crc"` // the CRC-32C, 8 hexadecimal digits
	Ref  string `json:"ref"` // name:size:crc
}

func newBlobRef(r writefence.BlobRef) blobRef {
	crc := fmt.Sprintf("%08x", r.CRC)
	return blobRef{Name: r.Name, Size: r.Size, CRC: crc, Ref: blobName(r.Name) + ":" + strconv.FormatInt(r.Size, 10) + ":" + crc}
}

// blobName renders a blob's name for the terminal: a name blob put
// writes holds only bytes that need no escaping, and is printed whole so
// that it can be pasted back; any other (read from a damaged or hostile
// record) is escaped.
func blobName(name string) string {
	if _, _, _, ok := keys.ParseBlobName(name); ok {
		return name
	}
	return escape.String(name)
}

// parseRef parses a reference in the form blob put prints: name:size:crc,
// the size in plain decimal digits and the CRC-32C in 8 hexadecimal digits.
func parseRef(s string) (writefence.BlobRef, error) {
	bad := func(why string) (writefence.BlobRef, error) {
		return writefence.BlobRef{}, usagef("writefence: blob reference %s: %s; want name:size:crc as blob put prints it", escape.String(s), why)
	}
	parts := strings.Split(s, ":")
	if len(parts) != 3 {
		return bad("not three fields separated by ':'")
	}
	name, size, crc := parts[0], parts[1], parts[2]
	if _, _, _, ok := keys.ParseBlobName(name); !ok {
		return bad("the name is not one blob put writes")
	}
	if size == "" || len(size) > 1 && size[0] == '0' || strings.Trim(size, "0123456789") != "" {
		return bad("the size is not plain decimal digits")
	}
	n, err := strconv.ParseInt(size, 10, 64)
	if err != nil {
		return bad("the size is out of range")
	}
	if len(crc) != 8 || strings.Trim(crc, "0123456789abcdefABCDEF") != "" {
		return bad("the CRC-32C is not 8 hexadecimal digits")
	}
	c, err := strconv.ParseUint(crc, 16, 32)
	if err != nil {
		return bad("the CRC-32C is not 8 hexadecimal digits")
	}
	return writefence.BlobRef{Name: name, Size: n, CRC: uint32(c)}, nil
}
