package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/defaults"
	"github.com/writefence/writefence/internal/escape"
	"github.com/writefence/writefence/internal/keys"
)

var blobPutCommand = command{
	name:    "blob put",
	args:    "<plugin> <shard>",
	nargs:   2,
	summary: "stream a file or stdin into a new blob of a shard and print its reference",
	help: `
Streams -file (or stdin) to its end into a new blob of the shard, through
Fence.PutBlob, and prints its reference on stdout, alone on its line:
name:size:crc, the blob's name (it carries -epoch, -writer and a random id),
its size in bytes and its CRC-32C in 8 hexadecimal digits. With -json the
reference is an object with "name", "size", "crc" and "ref" (the one-word
form). The reference is what a later commit names (commit -add REF).

It writes one new blob and nothing else: every name is new, so no blob is
ever replaced, and the shard's record is not touched, so no epoch check is
made yet. The blob is harmless until a commit references it: no reader sees
it, and gc deletes it once it can never be committed, or once it is older
than gc's -grace without a commit. Only a commit by the same -writer, at an
epoch not below the blob's and within that writer's tenure, can reference
it: a writer deposed meanwhile has written a blob nobody will read. Until a
shard's first commit, its record's epoch starts the tenure: a push above
the blob's epoch that lands before that commit leaves the blob uncommittable.

-term T draws the epoch instead of -epoch, as for push: one above the
shard's last epoch of term T by -writer, the epoch commit -term T then
commits at; a term a later term has written is refused (exit 4).

Memory stays bounded whatever the size. -timeout is 0 (never) by default,
since a large blob takes as long as it takes; SIGINT stops the upload (exit
130) and leaves at most an unreferenced blob, which gc deletes.

Refused, writing nothing: a missing -writer or -epoch, an -epoch that is
not plain decimal or above 2^63-1 without -allow-huge-epoch, and an empty
input without -empty (exit 2); a store that holds no blobs (exit 1, with
the reason). A blob the store holds at another size than was sent is an
unknown outcome (exit 8): run the command again, which writes a new blob.

examples:
  writefence blob put -store file:///tmp/wf -writer node-a -epoch 7 -file segment-0001.bin wal shard-0
  ref=$(writefence blob put -writer node-a -epoch 7 -file snap.bin wal shard-0) &&
    writefence commit -writer node-a -epoch 8 -add "$ref" -keep-payload wal shard-0
  pg_dump mydb | writefence blob put -json -writer node-a -epoch 7 db shard-0
  ref=$(writefence blob put -term "$WRITEFENCE_TERM" -file seg.bin wal shard-0)   # under writefence exec`,
	define: defineBlobPut,
}

// blobPutResult is blob put's -json output.
type blobPutResult struct {
	landedResult
	blobRef
}

func defineBlobPut(fs *flag.FlagSet, inv *invocation) action {
	w := addWriterFlags(fs, inv, 0, "that writes the blob, as its commit will name it")
	w.addCreateFlag(fs)
	w.addBlobsFlag(fs)
	brand := addBrandFlag(fs)
	file := fs.String("file", "-", "the blob's `file`; - reads stdin")
	identity := fs.String("identity", "", "wire `identity` the store's brand must hold (default "+defaults.Identity+")")
	empty := fs.Bool("empty", false, "accept an empty blob (without it 0 bytes are refused)")
	w.addTermFlag(fs)
	return func(ctx context.Context, inv *invocation, args []string) int {
		o := w.output()
		if err := w.check(); err != nil {
			return o.fail(err)
		}
		if err := w.names(*identity, true, args[0], args[1]).check(); err != nil {
			return o.fail(err)
		}
		r, from := stdin, "stdin"
		if *file != "-" {
			f, err := os.Open(*file)
			if err != nil {
				return o.fail(fmt.Errorf("writefence: blob: %w", err))
			}
			defer f.Close()
			r, from = f, escape.String(*file)
		}
		// One byte is read before the store is opened, to refuse an empty
		// input (a cron job, a redirect from /dev/null) without writing.
		br := bufio.NewReader(r)
		if _, err := br.Peek(1); err == io.EOF && !*empty {
			return o.fail(usagef("writefence: blob: %s is empty; pass -empty if an empty blob is meant", from))
		} else if err != nil && err != io.EOF {
			return o.fail(fmt.Errorf("writefence: blob: %w", err))
		}
		plugin, shard := args[0], args[1]
		return w.withWriteFence(ctx, o, *identity, *brand, func(ctx context.Context, _ *opened, fence *writefence.Fence) int {
			epoch := uint64(w.epoch)
			if w.term.set {
				var err error
				src := &writefence.TermSource{Fence: fence, Writer: w.writer, Term: func(context.Context) (uint64, error) { return w.term.term, nil }}
				if epoch, err = src.Epoch(ctx, plugin, shard); errors.Is(err, writefence.ErrTermEnded) {
					return o.fail(termEnded(ctx, fence, "blob put", w.term.term, plugin, shard, err))
				} else if err != nil {
					return o.fail(err)
				}
			}
			ref, err := fence.PutBlob(ctx, plugin, shard, w.writer, epoch, br)
			if err != nil {
				return o.fail(blobError(err))
			}
			b := newBlobRef(ref)
			if w.json {
				key, _ := keys.Blob(w.prefix, plugin, shard, ref.Name)
				o.emit(blobPutResult{landed(key, plugin, shard, w.writer, epoch), b})
			} else {
				fmt.Fprintln(inv.stdout, b.Ref)
			}
			return exitOK
		})
	}
}

var blobGetCommand = command{
	name:    "blob get",
	args:    "<plugin> <shard> <name>",
	nargs:   3,
	summary: "write a blob the shard's manifest references to stdout or a file, checked",
	help: `
Writes the blob <name> of the shard to stdout, or to -out F, through
Fence.OpenBlob: only a blob the recorded manifest references, and only if
its bytes match the reference (size and CRC-32C). <name> is the blob's name
or its whole reference, name:size:crc, as blob put and latest print it; a
reference must then be exactly the manifest's.

The bytes are checked as they stream, so a mismatch is found at the end: on
stdout, the bytes written before an error are not the blob and must be
discarded (trust them only on exit 0). With -out F the blob is written to a
temporary file beside F, flushed to disk and renamed to F only once every
byte matched: on any error F is left as it was, and no temporary file stays.
-timeout is 0 (never) by default, as for blob put. It writes nothing to the
store.

Refused: a blob the manifest does not reference, whether the store holds it
or not, and a shard never written (exit 3); bytes that do not match the
reference, a referenced blob the store no longer holds, or a corrupt
manifest (exit 6); a manifest of another wire identity (exit 5); a store
that holds no blobs (exit 1, with the reason); -json without -out, since
stdout carries the blob (exit 2).

examples:
  writefence blob get -store file:///tmp/wf wal shard-0 0000000000000007-3f9a...-node-a > segment-0001.bin
  writefence blob get -out snap.bin wal shard-0 0000000000000007-3f9a...-node-a:1048576:1a2b3c4d
  writefence latest -json wal shard-0 | jq -r '.blobs[].name' | while read -r n; do writefence blob get -out "$n" wal shard-0 "$n"; done`,
	define: defineBlobGet,
}

// blobGetResult is blob get's -json output, with -out.
type blobGetResult struct {
	Outcome string `json:"outcome"`
	Key     string `json:"key"`
	Plugin  string `json:"plugin"`
	Shard   string `json:"shard"`
	Out     string `json:"out"`
	blobRef
}

func defineBlobGet(fs *flag.FlagSet, inv *invocation) action {
	sf := addStoreFlags(fs, inv, 0)
	sf.addBlobsFlag(fs)
	identity := fs.String("identity", "", "wire `identity` the manifest must carry (default "+defaults.Identity+")")
	out := fs.String("out", "", "write the blob to this `file`, only once all of it matched (default stdout)")
	return func(ctx context.Context, inv *invocation, args []string) int {
		o := sf.output()
		if *out == "-" {
			*out = ""
		}
		if *out == "" && sf.json {
			return o.fail(usagef("writefence: -json needs -out: stdout carries the blob"))
		}
		plugin, shard, name := args[0], args[1], args[2]
		if err := (names{prefix: sf.prefix, identity: *identity, shards: [][2]string{{plugin, shard}}}).check(); err != nil {
			return o.fail(err)
		}
		var want *writefence.BlobRef
		if strings.Contains(name, ":") {
			ref, err := parseRef(name)
			if err != nil {
				return o.fail(err)
			}
			want, name = &ref, ref.Name
		} else if _, _, _, ok := keys.ParseBlobName(name); !ok {
			return o.fail(usagef("writefence: blob %s: not a name blob put writes; want the name, or the whole name:size:crc reference", escape.String(name)))
		}
		return sf.withStore(ctx, o, true, func(ctx context.Context, s *opened) int {
			fence := sf.newFence(s, *identity)
			rc, ref, err := fence.OpenBlob(ctx, plugin, shard, name)
			if err != nil {
				return o.fail(blobError(err))
			}
			defer rc.Close()
			key, _ := keys.Blob(sf.prefix, plugin, shard, name)
			if want != nil && *want != ref {
				return o.fail(fmt.Errorf("writefence: blob %s: the manifest references it as %s, not %s: %w",
					blobName(name), newBlobRef(ref).Ref, newBlobRef(*want).Ref, writefence.ErrNotFound))
			}
			if *out == "" {
				if err := copyBlob(inv.stdout, rc, "stdout"); err != nil {
					return o.fail(blobError(err))
				}
				return exitOK
			}
			if err := writeBlobFile(*out, rc); err != nil {
				return o.fail(blobError(err))
			}
			b := newBlobRef(ref)
			if sf.json {
				o.emit(blobGetResult{Outcome: "ok", Key: key, Plugin: plugin, Shard: shard, Out: *out, blobRef: b})
			} else {
				fmt.Fprintf(inv.stdout, "wrote %s: %s, %d bytes\n", escape.String(*out), b.Ref, b.Size)
			}
			return exitOK
		})
	}
}

// writeBlobFile writes what r yields to a temporary file beside path and
// renames it to path once r has reached io.EOF without error and the file
// is on disk: path is either left as it was or holds all of r.
func writeBlobFile(path string, r io.Reader) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("writefence: blob: %w", err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err := copyBlob(tmp, r, escape.String(path)); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("writefence: blob: write %s: %w", escape.String(path), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writefence: blob: write %s: %w", escape.String(path), err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("writefence: blob: %w", err)
	}
	return nil
}

// copyBlob copies r to w, to r's end, and says which side an error came
// from: the blob, or the output named to.
func copyBlob(w io.Writer, r io.Reader, to string) error {
	tw := &taggedWriter{w: w}
	_, err := io.Copy(tw, r)
	switch {
	case err == nil:
		return nil
	case tw.err != nil:
		return fmt.Errorf("writefence: blob: write %s: %w", to, tw.err)
	}
	return fmt.Errorf("writefence: blob: %w", err)
}

// taggedWriter remembers an error of its writer.
type taggedWriter struct {
	w   io.Writer
	err error
}

func (t *taggedWriter) Write(p []byte) (int, error) {
	n, err := t.w.Write(p)
	if err != nil {
		t.err = err
	}
	return n, err
}

// blobError says what a store that holds no blobs means for the command:
// the blob verbs, and a commit that adds a blob, need a store that does.
func blobError(err error) error {
	if !errors.Is(err, errors.ErrUnsupported) {
		return err
	}
	return &advisedError{err, "blob put, blob get, gc and commit -add need a store that holds blobs (s3://, gs://, file://): " +
		"give -blobs ADDRESS (or $WRITEFENCE_BLOBS) naming one, and the records stay in -store"}
}
