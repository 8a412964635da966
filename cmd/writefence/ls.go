package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/defaults"
	"github.com/writefence/writefence/internal/escape"
	"github.com/writefence/writefence/internal/keys"
)

var lsCommand = command{
	name:     "ls",
	args:     "[plugin]",
	nargs:    0,
	optional: 1,
	summary:  "list every shard under the prefix (or one plugin's) with its epoch, writer and blobs",
	help: `
Lists the shard records under the prefix, one line per shard, tab-separated:
plugin, shard, epoch, writer, status (ok, corrupt, wire or error), then the
number of blobs the manifest references, their bytes together and its
tenure floor (latest shows them). Names are escaped as in every message, so
a line always has eight fields. A record that fails to decode is listed with
status corrupt, the epoch and writer of its header when the header still
decodes ("-" otherwise) and "-" for the blobs and the floor, never skipped;
run latest on it for the version settle needs. With -json each shard is one JSON
object per line. Shards come in the store's listing order: key order on
file, mem, s3 and gs stores, none on valkey.

The store must support listing (file, mem, s3, gs and valkey stores do). ls
exits 0 when every record decodes under -identity, otherwise with the status
of the first that does not (6 corrupt, 5 another identity, 1 unreadable),
after listing them all.

examples:
  writefence ls -store file:///tmp/wf
  writefence ls -store 's3://mirrors?endpoint=127.0.0.1:9000&secure=false' wal
  writefence ls -json -store valkey://127.0.0.1:6379/0 | jq -r 'select(.outcome != "ok") | .shard'`,
	define: defineLs,
}

// lsEntry is one listed shard, and ls's -json output line.
type lsEntry struct {
	Outcome  string `json:"outcome"`
	Plugin   string `json:"plugin"`
	Shard    string `json:"shard"`
	Key      string `json:"key"`
	Epoch    uint64 `json:"epoch,omitempty"`
	Writer   string `json:"writer,omitempty"`
	Identity string `json:"identity,omitempty"`
	Size     int    `json:"size"`
	// BlobCount and BlobBytes are the manifest's blobs, Since its tenure
	// floor; zero when the record does not decode.
	BlobCount int    `json:"blob_count"`
	BlobBytes int64  `json:"blob_bytes"`
	Since     uint64 `json:"since"`
	decoded   bool
	Version   string `json:"version,omitempty"`
	Check     string `json:"check,omitempty"`
	Error     string `json:"error,omitempty"`
}

func defineLs(fs *flag.FlagSet, inv *invocation) action {
	sf := addStoreFlags(fs, inv, defaultTimeout)
	identity := fs.String("identity", "", "wire `identity` the records must carry (default "+defaults.Identity+")")
	return func(ctx context.Context, inv *invocation, args []string) int {
		o := sf.output()
		prefix := sf.prefix
		if prefix == "" {
			prefix = keys.DefaultPrefix
		}
		under := keys.Shards(prefix)
		if len(args) == 1 {
			// The key of a shard "x" of the plugin ends in "/x": what is
			// before it is the plugin's part of every key.
			k, err := keys.Shard(prefix, args[0], "x")
			if err != nil {
				return o.fail(err)
			}
			under = strings.TrimSuffix(k, "x")
		}
		return sf.withStore(ctx, o, true, func(ctx context.Context, s *opened) int {
			lister, ok := s.store.(writefence.Lister)
			if !ok {
				return o.fail(fmt.Errorf("writefence: ls: the store %s cannot list its keys", s.addr))
			}
			var first error // the first record that did not decode
			emit := func(e lsEntry, err error) {
				if err != nil {
					if first == nil {
						first = err
					}
					_, e.Outcome = classify(err)
					e.Error = message(err)
					var corrupt *writefence.CorruptError
					if errors.As(err, &corrupt) {
						e.Check, e.Version = corrupt.Check, corrupt.Version
					}
				}
				if sf.json {
					o.emit(e)
					return
				}
				epoch, writer := "-", "-"
				if e.Epoch != 0 {
					epoch, writer = strconv.FormatUint(e.Epoch, 10), escape.String(e.Writer)
				}
				plugin, shard := escape.String(e.Plugin), escape.String(e.Shard)
				if e.Key == "" {
					plugin, shard = "?", "?"
				}
				count, bytes, since := "-", "-", "-"
				if e.decoded {
					count, bytes, since = strconv.Itoa(e.BlobCount), strconv.FormatInt(e.BlobBytes, 10), strconv.FormatUint(e.Since, 10)
				}
				fmt.Fprintf(inv.stdout, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", plugin, shard, epoch, writer, e.Outcome, count, bytes, since)
				if err != nil {
					fmt.Fprintln(inv.stderr, e.Error)
				}
			}
			fence := &writefence.Fence{Store: s.store, Prefix: sf.prefix, Identity: *identity}
			err := lister.List(ctx, under, func(key string) error {
				plugin, shard, ok := keys.ParseShard(prefix, key)
				if !ok {
					// Not a key the fence writes (another tool's object under
					// the prefix): nothing to decode.
					fmt.Fprintf(inv.stderr, "writefence ls: %s is not a shard key; left out\n", escape.String(key))
					return nil
				}
				info, err := fence.Inspect(ctx, plugin, shard)
				if err != nil && !errors.Is(err, writefence.ErrCorrupt) && !errors.Is(err, writefence.ErrWire) {
					if errors.Is(err, writefence.ErrNotFound) {
						return nil // deleted since it was listed
					}
					if ctx.Err() != nil {
						return err
					}
				}
				e := lsEntry{Outcome: "ok", Plugin: plugin, Shard: shard, Key: key, Epoch: info.Epoch, Writer: info.Writer,
					Identity: info.Identity, Size: len(info.Payload), Version: info.Version, Since: info.Since, BlobCount: len(info.Blobs),
					// A record of another identity decodes under its own.
					decoded: err == nil || errors.Is(err, writefence.ErrWire) && info.Epoch != 0}
				for _, b := range info.Blobs {
					e.BlobBytes += b.Size
				}
				emit(e, err)
				return nil
			})
			// A directory store reports the files it could not name after the
			// listing: corrupt records too, listed without plugin and shard.
			var unnamed []*writefence.CorruptError
			for _, e := range unjoin(err) {
				var corrupt *writefence.CorruptError
				if !errors.As(e, &corrupt) || corrupt.Key != "" {
					return o.fail(err)
				}
				unnamed = append(unnamed, corrupt)
			}
			for _, c := range unnamed {
				emit(lsEntry{}, c)
			}
			if first != nil {
				code, _ := classify(first)
				return code
			}
			return exitOK
		})
	}
}

// unjoin returns the errors err joins, or err alone.
func unjoin(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
