package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/writefence/writefence"
)

var latestCommand = command{
	name:    "latest",
	args:    "<plugin> <shard>",
	nargs:   2,
	summary: "show a shard's epoch, writer, identity, payload size and version token",
	help: `
Reads the shard's record once and decodes it strictly. The version token is
the store's, for exactly the bytes decoded: settle takes it. A record of
another wire identity is shown (its identity, epoch and writer) and exits 5;
a corrupt record shows the failed check and its version and exits 6.

examples:
  writefence latest -store file:///tmp/wf wal shard-0
  writefence latest -store s3://mirrors?endpoint=127.0.0.1:9000&secure=false -json wal shard-0
  writefence latest -out segment.bin wal shard-0     # also write the payload to a file`,
	define: defineLatest,
}

// latestResult is latest's -json output on success or on a foreign record.
type latestResult struct {
	Outcome string `json:"outcome"`
	Plugin  string `json:"plugin"`
	Shard   string `json:"shard"`
	recordInfo
	Error string `json:"error,omitempty"`
}

func defineLatest(fs *flag.FlagSet, inv *invocation) action {
	sf := addStoreFlags(fs, inv, time.Minute)
	identity := fs.String("identity", "", "wire `identity` the record must carry (default "+writefence.DefaultIdentity+")")
	out := fs.String("out", "", "also write the payload to this `file` (- for stdout, not with -json)")
	return func(ctx context.Context, inv *invocation, args []string) int {
		o := &output{inv: inv, json: sf.json}
		if *out == "-" && sf.json {
			return o.fail(usagef("writefence: -out - and -json both write to stdout"))
		}
		s, ctx, cancel, err := sf.open(ctx)
		defer cancel()
		if err != nil {
			return o.fail(err)
		}
		defer s.close()
		plugin, shard := args[0], args[1]
		info, err := inspect(ctx, s.store, sf.prefix, *identity, plugin, shard)
		var wire *writefence.WireError
		foreign := errors.As(err, &wire) && info.Writer != ""
		if err != nil && !foreign {
			var corrupt *writefence.CorruptError
			if errors.As(err, &corrupt) && corrupt.Version != "" {
				fmt.Fprintf(inv.stderr, "to overwrite it: writefence settle -confirm-version %s -writer W -epoch E -file F %s %s\n",
					shellQuote(corrupt.Version), shellQuote(plugin), shellQuote(shard))
			}
			return o.fail(err)
		}
		if sf.json {
			r := latestResult{Outcome: "ok", Plugin: plugin, Shard: shard, recordInfo: info}
			if err != nil {
				_, r.Outcome = classify(err)
				r.Error = err.Error()
			}
			o.emit(r)
		} else {
			w := inv.stdout
			if *out == "-" {
				w = inv.stderr // stdout carries the payload alone
			}
			fields(w,
				"key", writefence.Escape(info.Key),
				"epoch", strconv.FormatUint(info.Epoch, 10),
				"writer", writefence.Escape(info.Writer),
				"identity", writefence.Escape(info.Identity),
				"size", strconv.Itoa(info.Size),
				"version", writefence.Escape(info.Version))
		}
		if err != nil {
			code, _ := classify(err)
			fmt.Fprintln(inv.stderr, err)
			return code
		}
		if *out != "" {
			if err := writePayload(inv, *out, info.payload); err != nil {
				return o.fail(err)
			}
		}
		return exitOK
	}
}

// shellQuote renders s as one shell word, escaped for the terminal first.
func shellQuote(s string) string {
	s = writefence.Escape(s)
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("-_./:=%+@", c)) {
			return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
		}
	}
	return s
}

func writePayload(inv *invocation, path string, payload []byte) error {
	if path == "-" {
		_, err := inv.stdout.Write(payload)
		return err
	}
	if err := os.WriteFile(path, payload, 0o600); err != nil {
		return fmt.Errorf("writefence: write payload: %w", err)
	}
	return nil
}
