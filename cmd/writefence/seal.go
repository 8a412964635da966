package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/defaults"
	"github.com/writefence/writefence/internal/escape"
	"github.com/writefence/writefence/internal/keys"
)

var sealCommand = command{
	name:    "seal",
	args:    "<plugin> <shard>",
	nargs:   2,
	summary: "raise a shard's recorded epoch without changing its payload, fencing every writer below it",
	help: `
Seals the shard at -epoch through Fence.Seal: the record keeps its payload
and blob references byte for byte, and now records -epoch and -writer, so
every later write at -epoch or below is refused (exit 4). A new writer's
first act, before its first push: a deposed writer still pushing is
fenced at once, not only at the new writer's first push. A shard never
written is sealed with an empty payload, so a deposed writer cannot create
it; latest then shows it with size 0.

The rules are push's: an -epoch not above the recorded one is refused
(exit 4, naming the recorded epoch and writer), unless the record already
is this seal (same epoch and writer), which succeeds, so a seal whose
answer was lost is run again; a corrupt record (exit 6) and one of another
-identity (exit 5) are refused without writing, and so is a store whose
installed brand holds another identity. A store that does not exist is
refused unless -create is given.

examples:
  writefence seal -store file:///tmp/wf -writer node-b -epoch 12 wal shard-0
  writefence seal -json -writer node-b -epoch 12 -identity myformat/v2 wal shard-0`,
	define: defineSeal,
}

func defineSeal(fs *flag.FlagSet, inv *invocation) action {
	w := addWriterFlags(fs, inv, defaultTimeout, "that seals, recorded as the shard's writer")
	w.addCreateFlag(fs)
	brand := addBrandFlag(fs)
	identity := fs.String("identity", "", "wire `identity` of the record (default "+defaults.Identity+")")
	return func(ctx context.Context, inv *invocation, args []string) int {
		o := w.output()
		if err := w.check(); err != nil {
			return o.fail(err)
		}
		if err := w.names(*identity, false, args[0], args[1]).check(); err != nil {
			return o.fail(err)
		}
		plugin, shard := args[0], args[1]
		return w.withWriteFence(ctx, o, *identity, *brand, func(ctx context.Context, _ *opened, fence *writefence.Fence) int {
			if err := fence.Seal(ctx, plugin, shard, w.writer, uint64(w.epoch)); err != nil {
				return o.fail(err)
			}
			key, _ := keys.Shard(w.prefix, plugin, shard)
			if w.json {
				o.emit(landed(key, plugin, shard, w.writer, uint64(w.epoch)))
			} else {
				fmt.Fprintf(inv.stdout, "sealed: %s at epoch %s by %s; every write at or below it is refused\n",
					escape.String(key), strconv.FormatUint(uint64(w.epoch), 10), escape.String(w.writer))
			}
			return exitOK
		})
	}
}
