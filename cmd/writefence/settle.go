package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"time"

	"github.com/writefence/writefence"
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
equal epochs are refused from then on.

examples:
  writefence latest wal shard-0             # exit 6: prints the check and the version
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
	sf := addStoreFlags(fs, inv, time.Minute)
	rf := addRecordFlags(fs)
	confirm := fs.String("confirm-version", "", "the version `token` of the corrupt record to replace, as latest printed it (required)")
	return func(ctx context.Context, inv *invocation, args []string) int {
		o := &output{inv: inv, json: sf.json}
		if *confirm == "" {
			return o.fail(usagef("writefence: -confirm-version is required: the version of the corrupt record, as latest prints it"))
		}
		if err := rf.check(); err != nil {
			return o.fail(err)
		}
		payload, err := rf.payload(writefence.DefaultMaxPayloadSize)
		if err != nil {
			return o.fail(err)
		}
		s, ctx, cancel, err := sf.open(ctx)
		defer cancel()
		if err != nil {
			return o.fail(err)
		}
		defer s.close()
		plugin, shard := args[0], args[1]

		_, err = inspect(ctx, s.store, sf.prefix, rf.identity, plugin, shard)
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
				writefence.Escape(corrupt.Version), writefence.Escape(*confirm), writefence.ErrConflict))
		}

		// The library's own Push writes the fresh record, so its encoding
		// is the library's; the store it writes through sees the confirmed
		// corrupt version as absent and turns the create-only write into
		// a write conditioned on that version. One attempt: a conflict
		// means the record changed, and the operator must look again.
		fence := &writefence.Fence{
			Store:       &settleStore{ConditionalStore: s.store, key: corrupt.Key, version: corrupt.Version},
			Identity:    rf.identity,
			Prefix:      sf.prefix,
			MaxAttempts: 1,
		}
		if err := fence.Push(ctx, plugin, shard, rf.writer, rf.epoch, payload); err != nil {
			return o.fail(err)
		}
		r := settleResult{Outcome: "ok", Key: corrupt.Key, Replaced: corrupt.Version, Check: corrupt.Check,
			Epoch: rf.epoch, Writer: rf.writer, PayloadSize: len(payload)}
		if info, err := inspect(ctx, s.store, sf.prefix, rf.identity, plugin, shard); err == nil && info.Epoch == rf.epoch && info.Writer == rf.writer {
			r.Version = info.Version
		}
		if sf.json {
			o.emit(r)
			return exitOK
		}
		fmt.Fprintf(inv.stdout, "settled: %s: corrupt version %s (%s) replaced by epoch %s by %s, %d bytes",
			writefence.Escape(r.Key), writefence.Escape(r.Replaced), r.Check, strconv.FormatUint(r.Epoch, 10), writefence.Escape(r.Writer), r.PayloadSize)
		if r.Version != "" {
			fmt.Fprintf(inv.stdout, ", version %s", writefence.Escape(r.Version))
		}
		fmt.Fprintln(inv.stdout)
		return exitOK
	}
}

// settleStore presents one exact version of one key as absent, and turns
// a create-only write of that key into a write conditioned on that
// version; any other write of that key is refused as a conflict, so
// nothing but the confirmed version is ever overwritten. Other versions
// and other keys read as the store has them.
type settleStore struct {
	writefence.ConditionalStore
	key, version string
}

func (s *settleStore) Get(ctx context.Context, key string) ([]byte, string, error) {
	data, version, err := s.ConditionalStore.Get(ctx, key)
	if err == nil && key == s.key && version == s.version {
		return nil, "", writefence.ErrNotFound
	}
	return data, version, err
}

func (s *settleStore) PutIfVersion(ctx context.Context, key string, data []byte, expectVersion string) (string, error) {
	if key == s.key {
		if expectVersion != "" {
			return "", fmt.Errorf("writefence: settle: %s changed since it was found corrupt: %w", writefence.Escape(key), writefence.ErrConflict)
		}
		expectVersion = s.version
	}
	return s.ConditionalStore.PutIfVersion(ctx, key, data, expectVersion)
}
