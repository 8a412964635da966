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
)

var settleCommand = command{
	name:    "settle",
	args:    "<plugin> <shard>",
	nargs:   2,
	summary: "overwrite a corrupt record with a fresh one, conditioned on exactly the version found corrupt",
	help: `
The fence never overwrites a corrupt record: pushes to it fail (exit 6) until
an operator settles it. settle reads the record and goes on only if it is
corrupt and its version token equals -confirm-version (the version latest
printed); it then writes a fresh record of the payload (-file or stdin) at
-epoch by -writer with one conditional write on exactly that version. A
record that is not corrupt is refused (exit 1); a record that changed since
latest showed it is refused as a conflict (exit 7), and nothing is written.
Choose -epoch above every epoch a live writer may hold: pushes at lower or
equal epochs are refused from then on. -epoch takes plain decimal digits only
(010 or 0x10 is a usage error, exit 2). A directory store's file damaged on
disk has a version of the form damaged-<sha256>: settle takes it the same way.

examples:
  writefence latest wal shard-0             # exit 6: prints the check, the version and the settle line
  writefence settle -confirm-version 3f9a... -writer operator -epoch 100 -file good.bin wal shard-0`,
	define: defineSettle,
}

// settleResult is settle's -json output when the record was replaced.
type settleResult struct {
	Outcome     string `json:"outcome"`
	Key         string `json:"key"`
	Replaced    string `json:"replaced"` // the corrupt version
	Check       string `json:"check"`    // the check it failed
	Version     string `json:"version,omitempty"`
	Epoch       uint64 `json:"epoch"`
	Writer      string `json:"writer"`
	PayloadSize int    `json:"size"`
}

func defineSettle(fs *flag.FlagSet, inv *invocation) action {
	rf := addRecordFlags(fs, inv)
	confirm := fs.String("confirm-version", "", "the version `token` of the corrupt record to replace, as latest printed it (required)")
	return func(ctx context.Context, inv *invocation, args []string) int {
		o := rf.output()
		if *confirm == "" {
			return o.fail(usagef("writefence: -confirm-version is required: the version of the corrupt record, as latest prints it"))
		}
		payload, err := rf.payload(defaults.MaxPayloadSize)
		if err != nil {
			return o.fail(err)
		}
		plugin, shard := args[0], args[1]
		return rf.withStore(ctx, o, false, func(ctx context.Context, s *opened) int {
			_, err := inspect(ctx, s.store, rf.prefix, rf.identity, plugin, shard)
			var corrupt *writefence.CorruptError
			switch {
			case errors.As(err, &corrupt) && corrupt.Version == "":
				return o.fail(fmt.Errorf("writefence: settle: the store itself cannot read the record, so it has no version to condition on: %w", err))
			case errors.As(err, &corrupt):
			case err == nil || errors.Is(err, writefence.ErrWire):
				return o.fail(errors.New("writefence: settle: the record is not corrupt; nothing to settle"))
			default:
				return o.fail(err)
			}
			if corrupt.Version != *confirm {
				return o.fail(fmt.Errorf("writefence: settle: the corrupt record's version is %s, not the confirmed %s: %w",
					escape.String(corrupt.Version), escape.String(*confirm), writefence.ErrConflict))
			}

			fence := &writefence.Fence{Store: s.store, Identity: rf.identity, Prefix: rf.prefix}
			if err := fence.Settle(ctx, plugin, shard, writefence.Settlement{Version: corrupt.Version, Writer: rf.writer, Epoch: uint64(rf.epoch), Payload: payload}); err != nil {
				return o.fail(err)
			}
			r := settleResult{Outcome: "ok", Key: corrupt.Key, Replaced: corrupt.Version, Check: corrupt.Check,
				Epoch: uint64(rf.epoch), Writer: rf.writer, PayloadSize: len(payload)}
			if info, err := inspect(ctx, s.store, rf.prefix, rf.identity, plugin, shard); err == nil && info.Epoch == uint64(rf.epoch) && info.Writer == rf.writer {
				r.Version = info.Version
			}
			if rf.json {
				o.emit(r)
				return exitOK
			}
			fmt.Fprintf(inv.stdout, "settled: %s: corrupt version %s (%s) replaced by epoch %s by %s, %d bytes",
				escape.String(r.Key), escape.String(r.Replaced), r.Check, strconv.FormatUint(r.Epoch, 10), escape.String(r.Writer), r.PayloadSize)
			if r.Version != "" {
				fmt.Fprintf(inv.stdout, ", version %s", escape.String(r.Version))
			}
			fmt.Fprintln(inv.stdout)
			return exitOK
		})
	}
}
