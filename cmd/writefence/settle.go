package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/defaults"
	"github.com/writefence/writefence/internal/escape"
	"github.com/writefence/writefence/internal/keys"
)

var settleCommand = command{
	name:    "settle",
	args:    "<plugin> <shard>",
	nargs:   2,
	summary: "overwrite a corrupt record with a fresh one, conditioned on exactly the version found corrupt",
	help: `
The fence never overwrites a corrupt record: pushes to it fail (exit 6) until
an operator settles it (on S3, GCS and Azure, a push reads a large record's
head alone, so one whose payload alone was rewritten from outside is
replaced by a push above its epoch: promise 7). settle writes a fresh record of the payload (-file or
stdin) at -epoch by -writer with one conditional write on exactly the version
-confirm-version names (the version latest printed), through Fence.Settle,
which decides on its own read of the record. A record that is not corrupt is
refused (exit 1), unless it is exactly this settle's: a settle whose outcome
is unknown (exit 8) is resolved by running the same command again. A record
that changed since latest showed it is refused as a conflict (exit 7), and
nothing is written. A directory store's file or a Valkey value damaged in
place has a version of the form damaged-<hash>: settle takes it the same
way.

settle never lowers an epoch. When the corrupt record's header still
decodes (latest shows the epoch it claims), -epoch must be above it (else
exit 4). When not even the header can be read, the store holds no epoch to
stay above: -floor is then required, the highest epoch ever granted for the
shard (by whatever elects writers), and -epoch must be above it (without it,
exit 2). Every settle is also entered in the shard's settle log, and -epoch
must be above every epoch settled there before (else exit 4): damaged bytes
can repeat, so running an old settle line again over new damage is refused.
Choose -epoch above every epoch a live writer may hold: pushes at lower or
equal epochs are refused from then on.

A shard's blobs (see commit) survive the settle: the settled record keeps
the references of the corrupt one when they still decode (latest lists
them), so gc keeps those blobs. When they cannot be read (the references
themselves are damaged, or not even the header decodes and the shard has
blobs), settle refuses (exit 2) rather than drop them unseen: -drop-blobs
settles without them, and every blob of the shard the settled record does
not reference then becomes garbage that gc deletes. -blobs names the store
of the blobs when -store holds none, as for gc.

-epoch and -floor take plain decimal digits only (010 or 0x10 is a usage
error, exit 2); an -epoch above 2^63-1 needs -allow-huge-epoch, and an empty
payload -empty, as for push. On a Valkey server with replicas, give the
address wait=N as for push ('valkey://host:port/0?wait=1'), so that the
settle counts only once the replicas hold it.

A record that was lost or set back (a lifecycle rule, a TTL, eviction, a
restore from backup: a writer that had seen it reports exit 12) is settled
with -lost: -confirm-version is the version latest shows now, or omitted
when latest finds no record; -floor is required, at least the epoch the
refusal says was seen; -epoch is above it. The record is written on exactly
that version (created when absent), keeping the references of the record
found; a shard with blobs but no record needs -drop-blobs.

Every settle keeps the shard's floor, as Fence.KeepFloor does (a key of the
reserved space, <prefix>_floor/<plugin>/<shard>, which writers that keep the
floor read before every write): -epoch must be above it (else exit 4,
naming the floor's key), and the settle raises it to -epoch.

examples:
  writefence latest wal shard-0             # exit 6: prints the check, the version and the settle line
  writefence settle -confirm-version 3f9a... -writer operator -epoch 100 -file good.bin wal shard-0
  writefence settle -confirm-version damaged-5e8c... -writer operator -floor 41 -epoch 100 -file good.bin wal shard-0
  writefence settle -lost -writer operator -floor 41 -epoch 100 -file good.bin wal shard-0   # the record was deleted`,
	define: defineSettle,
}

// settleResult is settle's -json output when the record was replaced.
type settleResult struct {
	Outcome     string `json:"outcome"`
	Key         string `json:"key"`
	Replaced    string `json:"replaced"` // the corrupt version
	Version     string `json:"version,omitempty"`
	Epoch       uint64 `json:"epoch"`
	Floor       uint64 `json:"floor,omitempty"`
	Writer      string `json:"writer"`
	PayloadSize int    `json:"size"`
}

func defineSettle(fs *flag.FlagSet, inv *invocation) action {
	rf := addRecordFlags(fs, inv)
	brand := addBrandFlag(fs)
	confirm := fs.String("confirm-version", "", "the version `token` of the corrupt record to replace, as latest printed it (required, except with -lost over no record)")
	lost := fs.Bool("lost", false, "settle a record that was lost or set back (exit 12) rather than a damaged one: -confirm-version is the version latest shows now, omitted when there is no record; -floor is required")
	var floor epochValue
	fs.Var(&floor, "floor", "the highest `epoch` ever granted for the shard; -epoch must be above it (required when the corrupt record's header cannot be read)")
	rf.addBlobsFlag(fs)
	dropBlobs := fs.Bool("drop-blobs", false, "settle without the blobs the corrupt record references, which then become garbage (gc deletes them); needed only when they cannot be read")
	return func(ctx context.Context, inv *invocation, args []string) int {
		o := rf.output()
		switch {
		case *confirm == "" && !*lost:
			return o.fail(usagef("writefence: -confirm-version is required: the version of the corrupt record, as latest prints it"))
		case *lost && floor == 0:
			return o.fail(usagef("writefence: -lost needs -floor: the highest epoch ever granted for the shard (at least the epoch the refusal says was seen)"))
		}
		payload, err := rf.payload(defaults.MaxPayloadSize)
		if err != nil {
			return o.fail(err)
		}
		if floor != 0 && rf.epoch <= floor {
			return o.fail(usagef("writefence: -epoch %s is not above -floor %s: settle at an epoch above every epoch ever granted", rf.epoch.String(), floor.String()))
		}
		plugin, shard := args[0], args[1]
		if err := rf.names(rf.identity, false, plugin, shard).check(); err != nil {
			return o.fail(err)
		}
		return rf.withWriteFence(ctx, o, rf.identity, *brand, func(ctx context.Context, s *opened, fence *writefence.Fence) int {
			// A settle keeps the shard's floor whether or not the writers
			// do (Fence.KeepFloor): for writers that keep it, a settle not
			// above it would leave a record they all refuse, and one that
			// left it below the settle would let a record set back under
			// the settle pass them; for the others the floor's key is
			// never read.
			fence.KeepFloor = true
			err := fence.Settle(ctx, plugin, shard, writefence.Settlement{Version: *confirm, Writer: rf.writer,
				Epoch: uint64(rf.epoch), Payload: payload, Floor: uint64(floor), DropBlobs: *dropBlobs, Lost: *lost})
			// Empty only for names Settle refused before reading anything.
			key, _ := keys.Shard(rf.prefix, plugin, shard)
			if err != nil {
				return o.fail(settleError(err, key))
			}
			r := settleResult{Outcome: "ok", Key: key, Replaced: *confirm, Epoch: uint64(rf.epoch), Floor: uint64(floor),
				Writer: rf.writer, PayloadSize: len(payload)}
			if info, err := inspect(ctx, s.store, rf.prefix, rf.identity, plugin, shard); err == nil && info.Epoch == r.Epoch && info.Writer == r.Writer {
				r.Version = info.Version
			}
			if rf.json {
				o.emit(r)
				return exitOK
			}
			what := "corrupt version " + escape.String(r.Replaced)
			switch {
			case *lost && r.Replaced == "":
				what = "lost record"
			case *lost:
				what = "set-back version " + escape.String(r.Replaced)
			}
			fmt.Fprintf(inv.stdout, "settled: %s: %s replaced by epoch %s by %s, %d bytes",
				escape.String(r.Key), what, strconv.FormatUint(r.Epoch, 10), escape.String(r.Writer), r.PayloadSize)
			if r.Version != "" {
				fmt.Fprintf(inv.stdout, ", version %s", escape.String(r.Version))
			}
			fmt.Fprintln(inv.stdout)
			return exitOK
		})
	}
}

// settleError says what an operator does about a settle of the record at
// key that Fence.Settle refused. The other refusals (not found, conflict,
// stale, wire, corrupt) keep the library's message and exit status.
func settleError(err error, key string) error {
	var arg *writefence.InvalidArgumentError
	if !errors.As(err, &arg) {
		return err
	}
	switch arg.Arg {
	case "version":
		// -confirm-version is never empty here, so this is Settle's
		// refusal of a record that decodes: nothing on the command line is
		// wrong, and the status is the plain error's.
		return fmt.Errorf("writefence: settle %s: the record decodes, it is not corrupt: nothing to settle", escape.String(key))
	case "floor":
		return &advisedError{err, "pass -floor with the highest epoch ever granted for the shard (ask whatever elects writers), and an -epoch above it"}
	}
	return err
}
