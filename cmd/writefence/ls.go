package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

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
	summary:  "list every shard under the prefix (or one plugin's) with its epoch, writer and blobs, then the leases",
	help: `
Lists the shards under the prefix after a header line, one line per shard,
tab-separated: plugin, shard, epoch, writer, status, then the number of
blobs the manifest references, their bytes together and its tenure floor
(latest shows them). The status is ok, corrupt, wire or error for a shard
with a record, and no_record for one that holds blobs but no record (blobs
put and never committed): its blob columns then count the blobs stored,
which gc deletes once older than its -grace. Names are escaped as in every
message, so a line always has eight fields. A record that fails to decode
is listed with status corrupt, the epoch and writer of its header when the
header still decodes ("-" otherwise) and "-" for the blobs and the floor,
never skipped; run latest on it for the version settle needs.

Then, without a plugin, the leases under the prefix (writefence.Lease),
after a blank line and a header of their own: name, holder, term, state
(held, expired or released, by this host's clock) and expiry; lease show
shows one.

With -json each shard is one JSON object per line ("kind": "shard", and
"record": false for one with blobs only), then each lease ("kind":
"lease"); no header. Shards come in the store's listing order (key order on
file, mem, s3 and gs stores, none on valkey), those with blobs only after
them, by name.

The store must support listing (file, mem, s3, gs, valkey, dynamodb, etcd,
azblob and postgres stores do); the blobs are listed from -blobs when
given, and not at all from a store that holds none. ls exits 0 when every
record (and lease) decodes under -identity, otherwise with the status of the
first that does not (6 corrupt, 5 another identity, 1 unreadable), after
listing them all.

examples:
  writefence ls -store file:///tmp/wf
  writefence ls -store 's3://mirrors?endpoint=127.0.0.1:9000&secure=false' wal
  writefence ls -json -store valkey://127.0.0.1:6379/0 | jq -r 'select(.kind == "shard" and .outcome != "ok") | .shard'`,
	define: defineLs,
}

// lsHeader and lsLeaseHeader head ls's two tables.
const (
	lsHeader      = "PLUGIN\tSHARD\tEPOCH\tWRITER\tSTATUS\tBLOBS\tBYTES\tSINCE"
	lsLeaseHeader = "LEASE\tHOLDER\tTERM\tSTATE\tEXPIRY"
)

// lsEntry is one listed shard, and ls's -json output line.
type lsEntry struct {
	Kind     string `json:"kind"` // "shard"
	Outcome  string `json:"outcome"`
	Plugin   string `json:"plugin"`
	Shard    string `json:"shard"`
	Key      string `json:"key"`
	Record   bool   `json:"record"` // false: the shard holds blobs but no record
	Epoch    uint64 `json:"epoch,omitempty"`
	Writer   string `json:"writer,omitempty"`
	Identity string `json:"identity,omitempty"`
	Size     int    `json:"size"`
	// BlobCount and BlobBytes are the manifest's blobs, Since its tenure
	// floor; zero when the record does not decode. For a shard without a
	// record they count the blobs stored.
	BlobCount int    `json:"blob_count"`
	BlobBytes int64  `json:"blob_bytes"`
	Since     uint64 `json:"since"`
	decoded   bool
	Version   string `json:"version,omitempty"`
	Check     string `json:"check,omitempty"`
	Error     string `json:"error,omitempty"`
}

// lsLease is one listed lease, and ls's -json output line for it.
type lsLease struct {
	Kind string `json:"kind"` // "lease"
	leaseResult
	Error string `json:"error,omitempty"`
}

func defineLs(fs *flag.FlagSet, inv *invocation) action {
	sf := addStoreFlags(fs, inv, defaultTimeout)
	sf.addBlobsFlag(fs)
	identity := fs.String("identity", "", "wire `identity` the records must carry (default "+defaults.Identity+")")
	return func(ctx context.Context, inv *invocation, args []string) int {
		o := sf.output()
		prefix := prefixOf(sf.prefix)
		under, blobsUnder := keys.Shards(prefix), keys.AllBlobs(prefix)
		if len(args) == 1 {
			// The key of a shard "x" of the plugin ends in "/x": what is
			// before it is the plugin's part of every key, and so for blobs.
			k, err := keys.Shard(prefix, args[0], "x")
			if err != nil {
				return o.fail(err)
			}
			under = strings.TrimSuffix(k, "x")
			b, err := keys.Blobs(prefix, args[0], "x")
			if err != nil {
				return o.fail(err)
			}
			blobsUnder = strings.TrimSuffix(b, "x/")
		}
		return sf.withStore(ctx, o, true, func(ctx context.Context, s *opened) int {
			lister, ok := s.store.(writefence.Lister)
			if !ok {
				return o.fail(fmt.Errorf("writefence: ls: the store %s cannot list its keys", s.addr))
			}
			if !sf.json {
				fmt.Fprintln(inv.stdout, lsHeader)
			}
			var first error // the first record that did not decode
			fail := func(err error) string {
				if first == nil {
					first = err
				}
				_, outcome := classify(err)
				return outcome
			}
			emit := func(e lsEntry, err error) {
				e.Kind = "shard"
				if err != nil {
					e.Outcome = fail(err)
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
				if e.Key == "" && e.Record {
					plugin, shard = "?", "?"
				}
				status := e.Outcome
				if !e.Record {
					status = "no_record"
				}
				count, bytes, since := "-", "-", "-"
				if e.decoded {
					count, bytes = strconv.Itoa(e.BlobCount), strconv.FormatInt(e.BlobBytes, 10)
				}
				if e.decoded && e.Record {
					since = strconv.FormatUint(e.Since, 10)
				}
				fmt.Fprintf(inv.stdout, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", plugin, shard, epoch, writer, status, count, bytes, since)
				if err != nil {
					fmt.Fprintln(inv.stderr, e.Error)
				}
			}
			fence := sf.newFence(s, *identity)
			seen := map[[2]string]bool{} // the shards listed with a record
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
				seen[[2]string{plugin, shard}] = true
				e := lsEntry{Outcome: "ok", Plugin: plugin, Shard: shard, Key: key, Record: true, Epoch: info.Epoch, Writer: info.Writer,
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
				emit(lsEntry{Record: true}, c)
			}
			orphans, err := blobOnlyShards(ctx, s, prefix, blobsUnder, seen)
			if err != nil {
				return o.fail(err)
			}
			for _, e := range orphans {
				emit(e, nil)
			}
			if len(args) == 0 {
				if err := listLeases(ctx, o, lister, fence, prefix, fail); err != nil {
					return o.fail(err)
				}
			}
			if first != nil {
				code, _ := classify(first)
				return code
			}
			return exitOK
		})
	}
}

// blobOnlyShards lists the shards under blobsUnder that hold blobs but
// are not in seen (the shards listed with a record), with the number and
// bytes of their blobs, by plugin and shard. A store that holds no blobs
// has none.
func blobOnlyShards(ctx context.Context, s *opened, prefix, blobsUnder string, seen map[[2]string]bool) ([]lsEntry, error) {
	bstore := s.store
	if s.blobs != nil {
		bstore = s.blobs
	}
	bs, ok := blobStoreOf(bstore)
	if !ok {
		return nil, nil
	}
	found := map[[2]string]*lsEntry{}
	err := bs.ListBlobs(ctx, blobsUnder, func(b writefence.BlobInfo) error {
		plugin, shard, _, ok := keys.ParseBlob(prefix, b.Key)
		id := [2]string{plugin, shard}
		if !ok || seen[id] {
			return nil
		}
		e := found[id]
		if e == nil {
			e = &lsEntry{Outcome: "ok", Plugin: plugin, Shard: shard, decoded: true}
			found[id] = e
		}
		e.BlobCount++
		e.BlobBytes += b.Size
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("writefence: ls: list the blobs: %w", err)
	}
	entries := make([]lsEntry, 0, len(found))
	for _, e := range found {
		entries = append(entries, *e)
	}
	slices.SortFunc(entries, func(a, b lsEntry) int {
		return cmp.Or(cmp.Compare(a.Plugin, b.Plugin), cmp.Compare(a.Shard, b.Shard))
	})
	return entries, nil
}

// blobStoreOf returns s's BlobStore when s declares it as its own, as the
// library's Fence requires (writefence.Capable).
func blobStoreOf(s writefence.ConditionalStore) (writefence.BlobStore, bool) {
	c, ok := s.(writefence.Capable)
	if !ok {
		return nil, false
	}
	own := c.Capabilities()
	if t := reflect.TypeOf(s); t != reflect.TypeOf(own) || !t.Comparable() || own != s {
		return nil, false
	}
	bs, ok := s.(writefence.BlobStore)
	return bs, ok
}

// listLeases lists the leases under prefix, after a blank line and a
// header in text; fail records a lease that does not decode.
func listLeases(ctx context.Context, o *output, lister writefence.Lister, fence *writefence.Fence, prefix string, fail func(error) string) error {
	now := time.Now()
	header := false
	return lister.List(ctx, keys.Leases(prefix), func(key string) error {
		name, ok := keys.ParseLease(prefix, key)
		if !ok {
			return nil // not a lease's key
		}
		info, err := fence.InspectLease(ctx, name)
		if errors.Is(err, writefence.ErrNotFound) {
			return nil // deleted since it was listed
		}
		if err != nil && !errors.Is(err, writefence.ErrCorrupt) {
			return err
		}
		l := lsLease{Kind: "lease", leaseResult: newLeaseResult(info, now)}
		if err != nil {
			l.Outcome, l.Error, l.State = fail(err), message(err), "-"
			l.Expiry = nil
		}
		if o.json {
			o.emit(l)
			return nil
		}
		if !header {
			fmt.Fprintf(o.inv.stdout, "\n%s\n", lsLeaseHeader)
			header = true
		}
		holder, term, expiry := escape.String(l.Holder), strconv.FormatUint(l.Term, 10), "-"
		if l.Expiry != nil {
			expiry = l.Expiry.Format(time.RFC3339)
		}
		if err != nil {
			holder, term, l.State = "-", "-", l.Outcome
		}
		fmt.Fprintf(o.inv.stdout, "%s\t%s\t%s\t%s\t%s\n", escape.String(name), holder, term, l.State, expiry)
		if err != nil {
			fmt.Fprintln(o.inv.stderr, l.Error)
		}
		return nil
	})
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
