package main

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strconv"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/defaults"
	"github.com/writefence/writefence/internal/escape"
	"github.com/writefence/writefence/internal/keys"
)

var commitCommand = command{
	name:    "commit",
	args:    "<plugin> <shard>",
	nargs:   2,
	summary: "commit a shard's manifest: add and drop blob references at an epoch",
	help: fmt.Sprintf(`
Writes a new manifest of the shard at -epoch by -writer, through
Fence.Commit: the references the recorded manifest holds, minus each -drop
NAME, plus each -add REF (name:size:crc, as blob put prints it), and the
payload kept (-keep-payload) or replaced by -payload-file F (- reads
stdin). One of the two is required, so that a payload piped to the command
is never silently ignored. A shard never written starts from an empty
manifest.

-term T draws the epoch instead of -epoch, as for push: one above the
shard's last epoch of term T by -writer, so that blob put -term T before it
wrote its blobs at the same epoch (see blob put).

It lands only if -epoch is greater than the recorded epoch, as for push:
a deposed writer's commit is refused (exit 4, naming the recorded epoch and
writer), and nothing is written. It also lands only while every blob it
newly references exists in the store (else exit 3) at the size its
reference gives, and was written by -writer at an epoch not above -epoch
and not before the writer's tenure began, the floor latest shows as
"since" (else exit 2). A commit by another writer than the recorded one
starts a tenure above the recorded epoch: blobs written before it can never
be committed, and gc deletes them.

An -add of a blob the manifest references already, with the same
reference, changes nothing; with another size or CRC it is refused (exit
2). A -drop of a name the manifest does not reference changes nothing and
is said on stderr. So a commit whose outcome is unknown (exit 8) is settled
by running the same command again: it reports success if it landed.

The payload with the references is at most %d MiB (exit 2 above), and an
empty -payload-file needs -empty, as for push. -epoch takes plain decimal
digits up to 2^63-1, as for push. A commit that adds no blob works on any
store; -add needs a store that holds blobs (exit 1, with the reason).

examples:
  writefence commit -store file:///tmp/wf -writer node-a -epoch 8 -add 0000000000000007-3f9a...-node-a:1048576:1a2b3c4d -keep-payload wal shard-0
  writefence commit -writer node-a -epoch 9 -add "$ref" -drop 0000000000000007-3f9a...-node-a -payload-file manifest.json wal shard-0
  writefence commit -json -writer node-b -epoch 12 -keep-payload wal shard-0     # take over: blobs of earlier tenures become collectable
  writefence commit -term "$WRITEFENCE_TERM" -add "$ref" -keep-payload wal shard-0   # under writefence exec`, defaults.MaxPayloadSize>>20),
	define: defineCommit,
}

// commitResult is commit's -json output when the commit landed.
type commitResult struct {
	landedResult
	Size      int       `json:"size"`  // payload bytes
	Blobs     []blobRef `json:"blobs"` // every reference of the manifest written
	BlobBytes int64     `json:"blob_bytes"`
	Added     []string  `json:"added"`   // the names it newly references
	Dropped   []string  `json:"dropped"` // the names it no longer references
}

func defineCommit(fs *flag.FlagSet, inv *invocation) action {
	w := addWriterFlags(fs, inv, defaultTimeout, "recorded with the manifest")
	w.addCreateFlag(fs)
	w.addBlobsFlag(fs)
	brand := addBrandFlag(fs)
	identity := fs.String("identity", "", "wire `identity` of the manifest (default "+defaults.Identity+")")
	var adds []writefence.BlobRef
	fs.Func("add", "reference the blob `name:size:crc`, as blob put printed it (repeatable)", func(s string) error {
		ref, err := parseRef(s)
		if err != nil {
			return err
		}
		adds = append(adds, ref)
		return nil
	})
	var drops []string
	fs.Func("drop", "stop referencing the blob `name` (repeatable)", func(s string) error {
		if _, _, _, ok := keys.ParseBlobName(s); !ok {
			return usagef("writefence: -drop %s: not a name blob put writes", escape.String(s))
		}
		drops = append(drops, s)
		return nil
	})
	payloadFile := fs.String("payload-file", "", "replace the manifest's payload with this `file`; - reads stdin")
	keep := fs.Bool("keep-payload", false, "keep the recorded payload")
	empty := fs.Bool("empty", false, "accept an empty -payload-file")
	w.addTermFlag(fs)
	return func(ctx context.Context, inv *invocation, args []string) int {
		o := w.output()
		if err := w.check(); err != nil {
			return o.fail(err)
		}
		if err := checkEdits(adds, drops); err != nil {
			return o.fail(err)
		}
		if err := w.names(*identity, false, args[0], args[1]).check(); err != nil {
			return o.fail(err)
		}
		var payload []byte
		switch {
		case *keep && *payloadFile != "":
			return o.fail(usagef("writefence: -keep-payload and -payload-file: give one of them"))
		case !*keep && *payloadFile == "":
			return o.fail(usagef("writefence: give -keep-payload to keep the recorded payload, or -payload-file F (- for stdin) to replace it"))
		case *payloadFile != "":
			var err error
			if payload, err = readPayload(*payloadFile, *empty, defaults.MaxPayloadSize); err != nil {
				return o.fail(err)
			}
		}
		plugin, shard := args[0], args[1]
		return w.withWriteFence(ctx, o, *identity, *brand, func(ctx context.Context, _ *opened, fence *writefence.Fence) int {
			var last edit // the edit of the manifest that was written
			commit := func(epoch uint64) error {
				return fence.Commit(ctx, plugin, shard, w.writer, epoch, func(m writefence.Manifest) (writefence.Manifest, error) {
					e, err := apply(m, payload, *keep, adds, drops)
					if err == nil {
						last = e
					}
					return e.next, err
				})
			}
			epoch, err := uint64(w.epoch), error(nil)
			if w.term.set {
				epoch, err = atTerm(ctx, fence, "commit", w.term.term, plugin, shard, w.writer, func(src writefence.EpochSource) (uint64, error) {
					epoch, err := src.Epoch(ctx, plugin, shard)
					if err != nil {
						return 0, err
					}
					return epoch, commit(epoch)
				})
			} else {
				err = commit(epoch)
			}
			if err != nil {
				return o.fail(blobError(err))
			}
			for _, n := range last.absent {
				fmt.Fprintf(inv.stderr, "writefence commit: -drop %s: the manifest does not reference it; nothing to drop\n", blobName(n))
			}
			key, _ := keys.Shard(w.prefix, plugin, shard)
			r := commitResult{landedResult: landed(key, plugin, shard, w.writer, epoch),
				Size: len(last.next.Payload), Blobs: []blobRef{}, Added: last.added, Dropped: last.dropped}
			for _, b := range last.next.Blobs {
				r.Blobs = append(r.Blobs, newBlobRef(b))
				r.BlobBytes += b.Size
			}
			if w.json {
				o.emit(r)
				return exitOK
			}
			fmt.Fprintf(inv.stdout, "committed: %s epoch %s by %s: %d blobs, %s (added %d, dropped %d), payload %d bytes\n",
				escape.String(key), strconv.FormatUint(r.Epoch, 10), escape.String(r.Writer), len(r.Blobs), formatSize(r.BlobBytes),
				len(r.Added), len(r.Dropped), r.Size)
			return exitOK
		})
	}
}

// checkEdits refuses a commit's -add and -drop that contradict each other:
// a name added twice, or both added and dropped.
func checkEdits(adds []writefence.BlobRef, drops []string) error {
	seen := map[string]bool{}
	for _, a := range adds {
		if seen[a.Name] {
			return usagef("writefence: -add %s: given twice", a.Name)
		}
		seen[a.Name] = true
		if slices.Contains(drops, a.Name) {
			return usagef("writefence: blob %s: both -add and -drop", a.Name)
		}
	}
	return nil
}

// edit is one application of a commit's flags to a manifest.
type edit struct {
	next    writefence.Manifest
	added   []string // names newly referenced
	dropped []string // names no longer referenced
	absent  []string // -drop names the manifest did not reference
}

// apply returns the manifest the commit's flags make of m: its references
// without drops, then adds not already referenced; its payload, or
// payload unless keep. It is idempotent, so that a commit whose reply was
// lost is recognised as landed when it runs again: an add already
// referenced and a drop not referenced change nothing. An add of a name
// referenced with another size or CRC is refused.
func apply(m writefence.Manifest, payload []byte, keep bool, adds []writefence.BlobRef, drops []string) (edit, error) {
	e := edit{next: writefence.Manifest{Payload: m.Payload}}
	if !keep {
		e.next.Payload = payload
	}
	for _, r := range m.Blobs {
		if slices.Contains(drops, r.Name) {
			e.dropped = append(e.dropped, r.Name)
			continue
		}
		e.next.Blobs = append(e.next.Blobs, r)
	}
	for _, n := range drops {
		if !slices.Contains(e.dropped, n) {
			e.absent = append(e.absent, n)
		}
	}
	for _, a := range adds {
		i := slices.IndexFunc(e.next.Blobs, func(r writefence.BlobRef) bool { return r.Name == a.Name })
		switch {
		case i < 0:
			e.next.Blobs = append(e.next.Blobs, a)
			e.added = append(e.added, a.Name)
		case e.next.Blobs[i] != a:
			return edit{}, usagef("writefence: -add %s: the manifest references %s", newBlobRef(a).Ref, newBlobRef(e.next.Blobs[i]).Ref)
		}
	}
	if e.added == nil {
		e.added = []string{}
	}
	if e.dropped == nil {
		e.dropped = []string{}
	}
	return e, nil
}
