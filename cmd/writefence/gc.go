package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/defaults"
	"github.com/writefence/writefence/internal/escape"
	"github.com/writefence/writefence/internal/keys"
)

var gcCommand = command{
	name:    "gc",
	args:    "<plugin> <shard>",
	nargs:   2,
	summary: "delete a shard's blobs that no manifest can reference, and say what it kept and why",
	help: `
Runs Fence.Collect over the shard's blobs and prints one line per blob,
tab-separated: what gc did (deleted, would_delete with -dry-run, or kept),
the blob's name, its size, and why:
  referenced    kept: the recorded manifest references it
  grace         kept: unreferenced, but younger than -grace (or of any age over
                a record no commit wrote, which carries no horizon), so a writer of
                the current tenure, or one racing at an admissible epoch, may yet
                commit it
  foreign       kept: not a name blob put writes
  unreferenced  deleted: no manifest can reference it any more
Lines come in name order (by epoch, then id). A summary goes to stderr.
With -json each blob is one JSON object per line ("action", "reason",
"name", "size", "modified"), then a summary object.

What it deletes: never a blob the manifest references. At once, a blob that
can never be committed: one written before the manifest's tenure floor
(latest shows it as "since"), or by another writer than the manifest's at
an epoch not above the manifest's, such as a deposed writer's. Any other
unreferenced blob only once it is older than -grace by the store's own
clock: a writer must commit a blob within -grace of writing it, so choose
it well above the longest a writer may take, pauses included. -grace must
be positive (exit 2 otherwise). To read the store's clock gc writes one empty blob in the
reserved space and deletes it, -dry-run too (a -dry-run on a store that
refuses the write, one opened read-only, takes this machine's clock).

-dry-run deletes nothing and lists what gc would delete now; a later run
may delete more (blobs age, tenures advance), never a blob referenced then.
gc is safe to run from many processes at once.

Refused, deleting nothing: a corrupt manifest (exit 6), one of another wire
identity (exit 5), a store that holds no blobs (exit 1, with the reason;
-blobs names another store for them), a record absent or below the
shard's floor, the epoch of its last settle (exit 12: it was lost or set
back; see settle -lost). A shard that holds no record and no
blob, such as a mistyped name, is not found (exit 3); so is a shard with
blobs but no record (its blobs listed as kept, no_record): nothing says
which of them matter, and a record lost, or a -prefix or -store that is
not the writers', must not cost them. -record-gone says the record was
removed on purpose and no writer writes the shard: gc then deletes every
blob of it (and refuses a shard that has a record, exit 2, or a floor
key, exit 12: delete that too, it is <prefix>_floor/<plugin>/<shard>).

examples:
  writefence gc -store file:///tmp/wf -dry-run wal shard-0
  writefence gc -grace 72h wal shard-0
  writefence gc -json wal shard-0 | jq -r 'select(.action == "deleted") | .name'`,
	define: defineGC,
}

// gcBlob is one blob gc found, and gc's -json output line for it.
type gcBlob struct {
	Outcome  string    `json:"outcome"`
	Action   string    `json:"action"` // deleted, would_delete or kept
	Reason   string    `json:"reason"` // referenced, grace, foreign or unreferenced
	Name     string    `json:"name"`
	Key      string    `json:"key"`
	Size     int64     `json:"size"`
	Modified time.Time `json:"modified"` // by the store's clock
}

// gcSummary is gc's last -json output line.
type gcSummary struct {
	Outcome      string `json:"outcome"`
	Plugin       string `json:"plugin"`
	Shard        string `json:"shard"`
	DryRun       bool   `json:"dry_run"`
	Grace        string `json:"grace"`
	Deleted      int    `json:"deleted"` // with -dry-run: that would be
	DeletedBytes int64  `json:"deleted_bytes"`
	Referenced   int    `json:"referenced"`
	Kept         int    `json:"kept"` // unreferenced: within -grace, or foreign
}

func defineGC(fs *flag.FlagSet, inv *invocation) action {
	sf := addStoreFlags(fs, inv, 10*time.Minute)
	sf.addBlobsFlag(fs)
	identity := fs.String("identity", "", "wire `identity` the manifest must carry (default "+defaults.Identity+")")
	grace := new(time.Duration)
	*grace = 24 * time.Hour
	fs.Var((*durationValue)(grace), "grace", "delete an unreferenced blob of the current tenure only once it is older than this `duration`, by the store's clock")
	dryRun := fs.Bool("dry-run", false, "delete nothing; list what would be deleted")
	recordGone := fs.Bool("record-gone", false, "the shard's record was removed on purpose and no writer writes it: delete all its blobs")
	return func(ctx context.Context, inv *invocation, args []string) int {
		o := sf.output()
		if *grace <= 0 {
			return o.fail(usagef("writefence: -grace %s: want a positive duration, such as 24h", grace))
		}
		plugin, shard := args[0], args[1]
		if err := (names{prefix: sf.prefix, identity: *identity, shards: [][2]string{{plugin, shard}}}).check(); err != nil {
			return o.fail(err)
		}
		return sf.withStore(ctx, o, false, func(ctx context.Context, s *opened) int {
			fence := sf.newFence(s, *identity)
			// The floor a settle keeps (Fence.KeepFloor) tells a record
			// set back below it, which a fresh Fence cannot know: deleting
			// by such a record would delete what the lost manifest
			// referenced, while the shard waits for an operator.
			fence.KeepFloor = true
			report, err := fence.Collect(ctx, plugin, shard, writefence.GCOptions{Grace: *grace, DryRun: *dryRun, RecordGone: *recordGone})
			noRecord := errors.Is(err, writefence.ErrNotFound)
			// Collect refuses names the key space cannot hold before it
			// finds any blob.
			space, _ := keys.Blobs(sf.prefix, plugin, shard)
			deleted := "deleted"
			if *dryRun {
				deleted = "would_delete"
			}
			var blobs []gcBlob
			add := func(infos []writefence.BlobInfo, action string, reason func(name string) string) {
				for _, b := range infos {
					name := strings.TrimPrefix(b.Key, space)
					blobs = append(blobs, gcBlob{Outcome: "ok", Action: action, Reason: reason(name), Name: name, Key: b.Key, Size: b.Size, Modified: b.Modified})
				}
			}
			add(report.Deleted, deleted, func(string) string { return "unreferenced" })
			add(report.Referenced, "kept", func(string) string { return "referenced" })
			add(report.Kept, "kept", func(name string) string {
				_, _, _, ok := keys.ParseBlobName(name)
				switch {
				case !ok:
					return "foreign"
				case noRecord:
					return "no_record"
				}
				return "grace"
			})
			slices.SortFunc(blobs, func(a, b gcBlob) int { return cmp.Compare(a.Name, b.Name) })
			sum := gcSummary{Outcome: "ok", Plugin: plugin, Shard: shard, DryRun: *dryRun, Grace: grace.String()}
			var referencedBytes int64
			for _, b := range blobs {
				switch {
				case b.Action != "kept":
					sum.Deleted++
					sum.DeletedBytes += b.Size
				case b.Reason == "referenced":
					sum.Referenced++
					referencedBytes += b.Size
				default:
					sum.Kept++
				}
				if sf.json {
					o.emit(b)
				} else {
					fmt.Fprintf(inv.stdout, "%s\t%s\t%d\t%s\n", b.Action, blobName(b.Name), b.Size, b.Reason)
				}
			}
			switch {
			case noRecord && len(blobs) == 0:
				// A mistyped name must not pass for a clean shard.
				return o.fail(fmt.Errorf("writefence: gc: shard %s of plugin %s holds no record and no blob under -prefix %s: check the names (writefence ls lists the shards): %w",
					escape.String(shard), escape.String(plugin), escape.String(prefixOf(sf.prefix)), writefence.ErrNotFound))
			case noRecord:
				return o.fail(fmt.Errorf("writefence: gc: shard %s of plugin %s holds %d blobs but no record under -prefix %s, so nothing says which of them matter: nothing deleted. Check -prefix and -store against the writers' (writefence ls); if the record was lost, its blobs may be all that is left of the shard; if the shard was retired on purpose, gc -record-gone deletes them: %w",
					escape.String(shard), escape.String(plugin), len(blobs), escape.String(prefixOf(sf.prefix)), writefence.ErrNotFound))
			case err != nil:
				return o.fail(blobError(err))
			}
			if sf.json {
				o.emit(sum)
				return exitOK
			}
			did := "deleted"
			if *dryRun {
				did = "would delete"
			}
			fmt.Fprintf(inv.stderr, "writefence gc: %s %d blobs (%s); kept %d referenced (%s) and %d unreferenced, within -grace %s or foreign\n",
				did, sum.Deleted, formatSize(sum.DeletedBytes), sum.Referenced, formatSize(referencedBytes), sum.Kept, grace)
			return exitOK
		})
	}
}
