package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/defaults"
	"github.com/writefence/writefence/internal/escape"
	"github.com/writefence/writefence/internal/keys"
)

var pushCommand = command{
	name:    "push",
	args:    "<plugin> <shard>",
	nargs:   2,
	summary: "push a file or stdin as a shard's record at an epoch",
	help: fmt.Sprintf(`
Pushes the payload through Fence.Push: it lands only if -epoch is greater
than the recorded epoch (else exit 4, naming the recorded epoch and writer).
A push whose outcome is unknown (exit 8) is settled by running the same
command again. A store branded with brand install refuses a push of
another -identity (exit 5); -brand verify also refuses a store nobody
branded, -brand claim brands an empty store first, and -brand none checks
no brand. A store that does not exist (a directory that holds none, a
missing bucket, table or container) is refused (exit 1) unless -create is
given: a mistyped -store never becomes a new store where any epoch lands.

-term T draws the epoch instead of -epoch: T<<32 | n, with n one above
the shard's last epoch of term T by -writer (1 when there is none), so the
pushes of one term rise across separate runs of the command. A program run
by "writefence exec" has WRITEFENCE_TERM, WRITEFENCE_HOLDER,
WRITEFENCE_STORE, WRITEFENCE_PREFIX and WRITEFENCE_IDENTITY set, which
give -term's -writer, -store, -prefix and -identity their defaults: push -term "$WRITEFENCE_TERM" <plugin>
<shard> is all it needs. Once a later term has written the shard (the next
holder's seal), the push is refused (exit 4): the lease was lost, stop.

-epoch takes plain decimal digits only: 010, 0x10, +1 or 1_0 are refused
as usage errors (exit 2), never read as 8 or 16. An epoch above 2^63-1
(%d) is refused as well unless -allow-huge-epoch is
given: a recorded epoch is replaced only by a higher one and no command
lowers it, so one typed by mistake would refuse every writer elected after.

The payload (-file, or stdin) is at most %d MiB; a larger one is refused
(exit 2): put it with blob put, which streams any size, and commit its
reference. An empty payload is refused (exit 2) unless -empty is given, so
that a cron job or a redirect from /dev/null does not replace the shard's
state with nothing.

On a Valkey server with replicas, say in the address how many must hold a
push before it counts as landed: 'valkey://host:port/0?wait=1', with
&wait-timeout=2s to wait longer than the default 1s. Without wait= the
primary acknowledges a push before any replica has it, and a failover can
lose it; with it, a push the replicas do not confirm in time exits 8 (run
it again once they are back).

examples:
  writefence push -store file:///tmp/wf -writer node-a -epoch 7 -file segment.bin wal shard-0
  echo hello | writefence push -writer node-a -epoch 8 wal shard-0
  writefence push -store 'valkey://127.0.0.1:6379/0?wait=1' -writer node-a -epoch 9 -file segment.bin wal shard-0
  writefence push -writer node-a -epoch 10 -empty wal shard-0 </dev/null
  writefence push -term "$WRITEFENCE_TERM" -file segment.bin wal shard-0   # under writefence exec
  writefence push -json -writer node-b -epoch 11 -file snap.bin -brand verify wal shard-0`, uint64(maxPlainEpoch), defaults.MaxPayloadSize>>20),
	define: definePush,
}

// landedResult is what the -json output of a command that wrote shows
// first: the key written, its shard, and the writer and epoch of the
// write.
type landedResult struct {
	Outcome string `json:"outcome"`
	Key     string `json:"key"`
	Plugin  string `json:"plugin"`
	Shard   string `json:"shard"`
	Epoch   uint64 `json:"epoch"`
	Writer  string `json:"writer"`
}

// landed returns the landedResult of a write that landed.
func landed(key, plugin, shard, writer string, epoch uint64) landedResult {
	return landedResult{Outcome: "ok", Key: key, Plugin: plugin, Shard: shard, Epoch: epoch, Writer: writer}
}

// pushResult is push's -json output when the push landed.
type pushResult struct {
	landedResult
	Size int `json:"size"`
}

// stdin is where -file - reads; tests replace it.
var stdin io.Reader = os.Stdin

// writerFlags are the flags of a command that writes on behalf of a
// writer at an epoch: the store flags, -writer and -epoch.
type writerFlags struct {
	*storeFlags
	writer    string
	epoch     epochValue
	hugeEpoch bool          // -allow-huge-epoch
	term      termValue     // -term, on the commands that take it
	flags     *flag.FlagSet // the command's flags, which tell -term's defaults; nil: it takes no -term
}

func addWriterFlags(fs *flag.FlagSet, inv *invocation, timeout time.Duration, writerUsage string) *writerFlags {
	w := &writerFlags{storeFlags: addStoreFlags(fs, inv, timeout)}
	fs.StringVar(&w.writer, "writer", "", "`name` of the writer "+writerUsage+" (required)")
	fs.Var(&w.epoch, "epoch", "the write's `epoch`: plain decimal digits, at least 1 and at most 2^63-1 (required)")
	fs.BoolVar(&w.hugeEpoch, "allow-huge-epoch", false, "accept an -epoch above 2^63-1 (no command lowers a recorded epoch)")
	return w
}

// check refuses missing required flags and an epoch above maxPlainEpoch
// without -allow-huge-epoch. It runs before the store is opened.
func (w *writerFlags) check() error {
	if w.term.set {
		if err := w.termDefaults(); err != nil {
			return err
		}
	}
	switch {
	case w.writer == "":
		return usagef("writefence: -writer is required")
	case w.epoch == 0 && !w.term.set && w.flags != nil:
		return usagef("writefence: -epoch (or -term) is required, and at least 1")
	case w.epoch == 0 && !w.term.set:
		return usagef("writefence: -epoch is required and at least 1") // the command takes no -term
	case uint64(w.epoch) > maxPlainEpoch && !w.hugeEpoch:
		return usagef("writefence: -epoch %s is above 2^63-1 (%d): once recorded, only a higher epoch replaces it "+
			"and no command lowers it, so a mistyped epoch would fence out every writer ever elected; "+
			"pass -allow-huge-epoch if it is meant", w.epoch.String(), uint64(maxPlainEpoch))
	}
	return nil
}

// names are the names w writes plugin's shard with, under identity (of
// blobs, when blobs is set).
func (w *writerFlags) names(identity string, blobs bool, plugin, shard string) names {
	return names{prefix: w.prefix, identity: identity, writers: []string{w.writer}, shards: [][2]string{{plugin, shard}}, blobs: blobs}
}

// recordFlags are the flags of a command that writes a record: the
// writer's flags and the record's.
type recordFlags struct {
	*writerFlags
	file     string
	empty    bool // -empty
	identity string
}

func addRecordFlags(fs *flag.FlagSet, inv *invocation) *recordFlags {
	rf := &recordFlags{writerFlags: addWriterFlags(fs, inv, defaultTimeout, "recorded with the payload")}
	fs.StringVar(&rf.file, "file", "-", fmt.Sprintf("payload `file`, at most %d MiB; - reads stdin", defaults.MaxPayloadSize>>20))
	fs.BoolVar(&rf.empty, "empty", false, "accept an empty payload (without it 0 bytes are refused)")
	fs.StringVar(&rf.identity, "identity", "", "wire `identity` of the record (default "+defaults.Identity+")")
	return rf
}

// payload checks the writer's flags, then reads the payload (see
// readPayload). It runs before the store is opened.
func (rf *recordFlags) payload(limit int64) ([]byte, error) {
	if err := rf.check(); err != nil {
		return nil, err
	}
	return readPayload(rf.file, rf.empty, limit)
}

// readPayload reads the payload in file (- for stdin), refusing one above
// limit without reading more than one byte past it, and an empty one
// unless empty is set.
func readPayload(file string, empty bool, limit int64) ([]byte, error) {
	r, from := stdin, "stdin"
	if file != "-" {
		f, err := os.Open(file)
		if err != nil {
			return nil, fmt.Errorf("writefence: payload: %w", err)
		}
		defer f.Close()
		r, from = f, escape.String(file)
	}
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, fmt.Errorf("writefence: payload: %w", err)
	}
	switch {
	case int64(len(b)) > limit:
		return nil, usagef("writefence: payload: %s holds more than the record's limit of %d bytes (%d MiB); "+
			"put a payload this large in a blob, which takes any size: ref=$(writefence blob put -writer W -epoch N -file F PLUGIN SHARD), "+
			"then writefence commit -writer W -epoch N -add \"$ref\" -keep-payload PLUGIN SHARD", from, limit, limit>>20)
	case len(b) == 0 && !empty:
		// A cron job or </dev/null gives no bytes; landing them would
		// replace the shard's state with nothing and exit 0.
		return nil, usagef("writefence: payload: %s is empty: an empty record would replace the shard's state; pass -empty if that is meant", from)
	}
	return b, nil
}

func definePush(fs *flag.FlagSet, inv *invocation) action {
	rf := addRecordFlags(fs, inv)
	rf.addCreateFlag(fs)
	brand := addBrandFlag(fs)
	rf.addTermFlag(fs)
	return func(ctx context.Context, inv *invocation, args []string) int {
		o := rf.output()
		if rf.term.set {
			return pushAtTerm(ctx, o, rf, *brand, args[0], args[1])
		}
		payload, err := rf.payload(defaults.MaxPayloadSize)
		if err != nil {
			return o.fail(err)
		}
		plugin, shard := args[0], args[1]
		if err := rf.names(rf.identity, false, plugin, shard).check(); err != nil {
			return o.fail(err)
		}
		return rf.withWriteFence(ctx, o, rf.identity, *brand, func(ctx context.Context, _ *opened, fence *writefence.Fence) int {
			if err := fence.Push(ctx, plugin, shard, rf.writer, uint64(rf.epoch), payload); err != nil {
				return o.fail(err)
			}
			key, _ := keys.Shard(rf.prefix, plugin, shard)
			if rf.json {
				o.emit(pushResult{landed(key, plugin, shard, rf.writer, uint64(rf.epoch)), len(payload)})
			} else {
				fmt.Fprintf(inv.stdout, "landed: %s epoch %s by %s, %d bytes\n",
					escape.String(key), strconv.FormatUint(uint64(rf.epoch), 10), escape.String(rf.writer), len(payload))
			}
			return exitOK
		})
	}
}
