package main

import (
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/fakeclock"
	"github.com/writefence/writefence/internal/keys"
)

// noBlobStore is a store with the core interface only.
type noBlobStore struct{ writefence.ConditionalStore }

var shared struct {
	mu     sync.Mutex // guards the fields below
	stores map[string]*writefence.MemStore
	n      int
}

// sharedStore returns the shared MemStore named name.
func sharedStore(name string) (*writefence.MemStore, error) {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	s, ok := shared.stores[name]
	if !ok {
		return nil, fmt.Errorf("no shared store %q", name)
	}
	return s, nil
}

// sharedMem returns the address of a fresh MemStore that every run of the
// command in the test reaches, the store, and its blob clock.
func sharedMem(t *testing.T) (string, *writefence.MemStore, *fakeclock.Clock) {
	t.Helper()
	clock := &fakeclock.Clock{}
	s := &writefence.MemStore{Clock: clock.Now}
	shared.mu.Lock()
	shared.n++
	name := "s" + strconv.Itoa(shared.n)
	if shared.stores == nil {
		shared.stores = map[string]*writefence.MemStore{}
	}
	shared.stores[name] = s
	shared.mu.Unlock()
	t.Cleanup(func() {
		shared.mu.Lock()
		delete(shared.stores, name)
		shared.mu.Unlock()
	})
	return "shared://" + name, s, clock
}

// blobStore is a store a blob test runs on: its address, and the test's
// own handle on its blobs, to look at them and damage them.
type blobStore struct {
	addr  string
	blobs writefence.BlobStore
}

// forBlobStores runs test on each store that holds blobs, a fresh one per
// subtest: the shared MemStore, and a directory store once it holds blobs
// (whether it does is asked of the library, which answers
// errors.ErrUnsupported for a store that does not).
func forBlobStores(t *testing.T, test func(t *testing.T, s blobStore)) {
	t.Run("mem", func(t *testing.T) {
		addr, s, _ := sharedMem(t)
		test(t, blobStore{addr: addr, blobs: s})
	})
	t.Run("file", func(t *testing.T) {
		addr := fileStore(t)
		s, err := openStore(t.Context(), addr)
		require.NoError(t, err)
		t.Cleanup(func() { s.close() })
		bs, ok := s.store.(writefence.BlobStore)
		require.True(t, ok, "%T holds no blobs", s.store)
		test(t, blobStore{addr: addr, blobs: bs})
	})
}

// put streams data into a blob of wal/s with blob put, and returns the
// reference it printed.
func put(t *testing.T, addr, writer, epoch, data string) string {
	t.Helper()
	r := wf(t, "blob", "put", "-store", addr, "-writer", writer, "-epoch", epoch, "-file", writeFile(t, data), "wal", "s")
	require.Equal(t, exitOK, r.code, "%s", r)
	require.Equal(t, 1, strings.Count(r.stdout, "\n"), "the reference alone: %s", r)
	return strings.TrimSuffix(r.stdout, "\n")
}

// nameOf is the name of a reference name:size:crc.
func nameOf(ref string) string { return strings.SplitN(ref, ":", 2)[0] }

func commit(t *testing.T, addr, writer, epoch string, flags ...string) result {
	t.Helper()
	args := append([]string{"commit", "-store", addr, "-writer", writer, "-epoch", epoch}, flags...)
	return wf(t, append(args, "wal", "s")...)
}

func crc32c(s string) string {
	return fmt.Sprintf("%08x", crc32.Checksum([]byte(s), crc32.MakeTable(crc32.Castagnoli)))
}

// damage replaces the bytes of the blob name of wal/s behind the fence's
// back, through the store's own blob calls.
func damage(t *testing.T, s blobStore, name, data string) {
	t.Helper()
	key, err := keys.Blob("", "wal", "s", name)
	require.NoError(t, err)
	require.NoError(t, s.blobs.DeleteBlob(t.Context(), key))
	_, err = s.blobs.CreateBlob(t.Context(), key, strings.NewReader(data))
	require.NoError(t, err)
}

// blobExists tells whether the store holds the blob name of wal/s.
func blobExists(t *testing.T, s blobStore, name string) bool {
	t.Helper()
	key, err := keys.Blob("", "wal", "s", name)
	require.NoError(t, err)
	_, err = s.blobs.StatBlob(t.Context(), key)
	if errors.Is(err, writefence.ErrNotFound) {
		return false
	}
	require.NoError(t, err)
	return true
}

// TestBlobRoundTrip: blob put prints a reference whose size and CRC-32C
// are the bytes'; commit -add references it; latest and ls show it; blob
// get writes back exactly the bytes, to stdout and to -out; commit -drop
// stops referencing it and keeps the payload.
func TestBlobRoundTrip(t *testing.T) {
	forBlobStores(t, func(t *testing.T, s blobStore) {
		one := put(t, s.addr, "node-a", "3", "segment one")
		assert.Regexp(t, `^0000000000000003-[0-9a-f]{32}-node-a:11:`+crc32c("segment one")+`$`, one)

		stdin = strings.NewReader("segment two, from stdin")
		t.Cleanup(func() { stdin = os.Stdin })
		r := wf(t, "blob", "put", "-json", "-store", s.addr, "-writer", "node-a", "-epoch", "4", "wal", "s")
		require.Equal(t, exitOK, r.code, "%s", r)
		m := jsonOf(t, r)
		assert.Equal(t, "ok", m["outcome"])
		assert.EqualValues(t, 23, m["size"])
		assert.Equal(t, crc32c("segment two, from stdin"), m["crc"])
		two := m["ref"].(string)
		assert.Equal(t, two, m["name"].(string)+":23:"+crc32c("segment two, from stdin"))
		assert.Equal(t, "writefence/b/wal/s/"+m["name"].(string), m["key"])

		r = commit(t, s.addr, "node-a", "5", "-add", one, "-add", two, "-payload-file", writeFile(t, "manifest v1"))
		require.Equal(t, exitOK, r.code, "%s", r)
		assert.Equal(t, "committed: writefence/s/wal/s epoch 5 by node-a: 2 blobs, 34 bytes (added 2, dropped 0), payload 11 bytes\n", r.stdout)

		r = wf(t, "latest", "-store", s.addr, "wal", "s")
		require.Equal(t, exitOK, r.code, "%s", r)
		for _, line := range []string{"epoch     5", "since     0", "blobs     2, 34 bytes", "blob      " + one, "blob      " + two, "size      11"} {
			assert.Contains(t, r.stdout, line+"\n")
		}
		r = wf(t, "latest", "-json", "-store", s.addr, "wal", "s")
		require.Equal(t, exitOK, r.code, "%s", r)
		m = jsonOf(t, r)
		assert.EqualValues(t, 34, m["blob_bytes"])
		assert.EqualValues(t, 0, m["since"])
		blobs := m["blobs"].([]any)
		require.Len(t, blobs, 2)
		first := blobs[0].(map[string]any)
		assert.Equal(t, one, first["ref"])
		assert.Equal(t, nameOf(one), first["name"])
		assert.EqualValues(t, 11, first["size"])
		assert.Equal(t, crc32c("segment one"), first["crc"])

		r = wf(t, "ls", "-store", s.addr)
		require.Equal(t, exitOK, r.code, "%s", r)
		assert.Equal(t, lsHeader+"\nwal\ts\t5\tnode-a\tok\t2\t34\t0\n", r.stdout)
		r = wf(t, "ls", "-json", "-store", s.addr)
		m = jsonOf(t, r)
		assert.EqualValues(t, 2, m["blob_count"])
		assert.EqualValues(t, 34, m["blob_bytes"])

		r = wf(t, "blob", "get", "-store", s.addr, "wal", "s", nameOf(one))
		require.Equal(t, exitOK, r.code, "%s", r)
		assert.Equal(t, "segment one", r.stdout)
		r = wf(t, "blob", "get", "-store", s.addr, "wal", "s", two) // the whole reference
		require.Equal(t, exitOK, r.code, "%s", r)
		assert.Equal(t, "segment two, from stdin", r.stdout)
		out := filepath.Join(t.TempDir(), "two.bin")
		r = wf(t, "blob", "get", "-json", "-store", s.addr, "-out", out, "wal", "s", nameOf(two))
		require.Equal(t, exitOK, r.code, "%s", r)
		assert.Equal(t, "ok", jsonOf(t, r)["outcome"])
		assert.Equal(t, two, jsonOf(t, r)["ref"])
		got, err := os.ReadFile(out)
		require.NoError(t, err)
		assert.Equal(t, "segment two, from stdin", string(got))

		var stderr strings.Builder
		code := run(t.Context(), []string{"blob", "get", "-store", s.addr, "wal", "s", nameOf(one)}, failingWriter{}, &stderr)
		assert.Equal(t, exitError, code, "%s", stderr.String())
		assert.Contains(t, stderr.String(), "write stdout")

		r = commit(t, s.addr, "node-a", "6", "-drop", nameOf(one), "-keep-payload")
		require.Equal(t, exitOK, r.code, "%s", r)
		assert.Contains(t, r.stdout, "1 blobs, 23 bytes (added 0, dropped 1), payload 11 bytes")
		r = wf(t, "latest", "-store", s.addr, "-out", "-", "wal", "s")
		require.Equal(t, exitOK, r.code, "%s", r)
		assert.Equal(t, "manifest v1", r.stdout, "-keep-payload kept it")
		assert.NotContains(t, r.stderr, one)
		assert.Equal(t, exitNotFound, wf(t, "blob", "get", "-store", s.addr, "wal", "s", nameOf(one)).code, "a dropped blob is not read")
	})
}

// TestBlobPutUsage: blob put refuses what push refuses, before writing.
func TestBlobPutUsage(t *testing.T) {
	addr, s, _ := sharedMem(t)
	stdin = strings.NewReader("")
	t.Cleanup(func() { stdin = os.Stdin })
	for _, flags := range [][]string{
		{"-epoch", "1"},
		{"-writer", "a"},
		{"-writer", "a", "-epoch", "010"},
		{"-writer", "a", "-epoch", "9223372036854775808"},
		{"-writer", "a", "-epoch", "1"}, // empty stdin
	} {
		r := wf(t, append(append([]string{"blob", "put", "-store", addr}, flags...), "wal", "s")...)
		assert.Equal(t, exitUsage, r.code, "%v: %s", flags, r)
	}
	space, err := keys.Blobs("", "wal", "s")
	require.NoError(t, err)
	require.NoError(t, s.ListBlobs(t.Context(), space, func(b writefence.BlobInfo) error {
		return fmt.Errorf("blob %s written", b.Key)
	}), "no blob written")

	r := wf(t, "blob", "put", "-json", "-store", addr, "-writer", "a", "-epoch", "1", "-empty", "wal", "s")
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.EqualValues(t, 0, jsonOf(t, r)["size"])
	assert.Equal(t, "00000000", jsonOf(t, r)["crc"])
}

// TestBlobGetRefused: blob get reads only a blob the manifest references
// (exit 3 otherwise, whether the blob exists or not), and refuses -json
// without -out and an argument that names no blob (exit 2).
func TestBlobGetRefused(t *testing.T) {
	forBlobStores(t, func(t *testing.T, s blobStore) {
		loose := put(t, s.addr, "a", "1", "never committed")
		r := wf(t, "blob", "get", "-store", s.addr, "wal", "s", nameOf(loose))
		assert.Equal(t, exitNotFound, r.code, "a shard never written: %s", r)

		kept := put(t, s.addr, "a", "1", "committed")
		require.Equal(t, exitOK, commit(t, s.addr, "a", "2", "-add", kept, "-keep-payload").code)
		out := filepath.Join(t.TempDir(), "out")
		r = wf(t, "blob", "get", "-json", "-out", out, "-store", s.addr, "wal", "s", nameOf(loose))
		assert.Equal(t, exitNotFound, r.code, "an unreferenced blob: %s", r)
		assert.Equal(t, "not_found", jsonOf(t, r)["outcome"])
		assert.Equal(t, 1, strings.Count(r.stdout, "\n"), "the failure alone: %s", r)
		assert.NoFileExists(t, out)
		assert.True(t, blobExists(t, s, nameOf(loose)), "the blob exists, unreferenced")

		ref, err := parseRef(kept)
		require.NoError(t, err)
		ref.CRC++
		r = wf(t, "blob", "get", "-store", s.addr, "wal", "s", newBlobRef(ref).Ref)
		assert.Equal(t, exitNotFound, r.code, "a reference the manifest does not hold: %s", r)
		assert.Empty(t, r.stdout)

		assert.Equal(t, exitUsage, wf(t, "blob", "get", "-json", "-store", s.addr, "wal", "s", nameOf(kept)).code, "-json without -out")
		assert.Equal(t, exitUsage, wf(t, "blob", "get", "-store", s.addr, "wal", "s", "seg-1").code)
	})
}

// TestBlobGetDamaged: a referenced blob whose bytes no longer match its
// reference (other bytes of the same size, another size, or gone) makes
// blob get exit 6; with -out nothing is written: no file, no temporary
// file, and a file already there is left as it was.
func TestBlobGetDamaged(t *testing.T) {
	forBlobStores(t, func(t *testing.T, s blobStore) {
		ref := put(t, s.addr, "a", "1", "original bytes")
		require.Equal(t, exitOK, commit(t, s.addr, "a", "2", "-add", ref, "-keep-payload").code)
		name := nameOf(ref)
		for _, c := range []struct {
			damage string // the blob's bytes now; "" removes it
			check  string
		}{
			{"ORIGINAL BYTES", "blob checksum"},
			{"original bytes!", "blob size 15, its reference says 14"},
			{"", "a referenced blob is missing"},
		} {
			if c.damage == "" {
				key, err := keys.Blob("", "wal", "s", name)
				require.NoError(t, err)
				require.NoError(t, s.blobs.DeleteBlob(t.Context(), key))
			} else {
				damage(t, s, name, c.damage)
			}
			dir := t.TempDir()
			out := filepath.Join(dir, "blob.bin")
			r := wf(t, "blob", "get", "-json", "-store", s.addr, "-out", out, "wal", "s", name)
			assert.Equal(t, exitCorrupt, r.code, "%s: %s", c.check, r)
			assert.Equal(t, "corrupt", jsonOf(t, r)["outcome"])
			assert.Equal(t, c.check, jsonOf(t, r)["check"])
			entries, err := os.ReadDir(dir)
			require.NoError(t, err)
			assert.Empty(t, entries, "%s: no -out file, no temporary file", c.check)

			require.NoError(t, os.WriteFile(out, []byte("old"), 0o600))
			assert.Equal(t, exitCorrupt, wf(t, "blob", "get", "-store", s.addr, "-out", out, "wal", "s", name).code)
			got, err := os.ReadFile(out)
			require.NoError(t, err)
			assert.Equal(t, "old", string(got), "%s: the file there is left as it was", c.check)
			entries, err = os.ReadDir(dir)
			require.NoError(t, err)
			assert.Len(t, entries, 1, "%s: no temporary file", c.check)

			r = wf(t, "blob", "get", "-store", s.addr, "wal", "s", name)
			assert.Equal(t, exitCorrupt, r.code, "%s: to stdout too: %s", c.check, r)
			assert.Contains(t, r.stderr, c.check)
		}
	})
}

// TestNoBlobStore: on a store that holds no blobs, blob put, gc and
// commit -add exit 1 with the reason; a commit that adds no blob lands.
func TestNoBlobStore(t *testing.T) {
	ref := keys.BlobName(1, "a", strings.Repeat("0", 32)) + ":5:00000000"
	for _, args := range [][]string{
		{"blob", "put", "-writer", "a", "-epoch", "1", "-file", writeFile(t, "x"), "wal", "s"},
		{"gc", "wal", "s"},
		{"commit", "-writer", "a", "-epoch", "1", "-add", ref, "-keep-payload", "wal", "s"},
	} {
		r := wf(t, append([]string{"-store", "noblobs://"}, append(args, "-json")...)...)
		assert.Equal(t, exitError, r.code, "%v: %s", args, r)
		assert.Equal(t, "error", jsonOf(t, r)["outcome"], "%v", args)
		assert.Contains(t, r.stderr, "holds no blobs", "%v", args)
		assert.Contains(t, r.stderr, "need a store that holds blobs", "%v", args)
	}
	r := wf(t, "commit", "-store", "noblobs://", "-writer", "a", "-epoch", "1", "-payload-file", writeFile(t, "m"), "wal", "s")
	assert.Equal(t, exitOK, r.code, "%s", r)
}

// TestBlobHelp: help lists the new commands, "blob" alone names its
// verbs, and each command's help says what it refuses, with the status.
func TestBlobHelp(t *testing.T) {
	r := wf(t, "help")
	for _, c := range []string{"blob put", "blob get", "commit", "gc"} {
		assert.Contains(t, r.stdout, "\n  "+c+" ")
	}
	r = wf(t, "help", "blob")
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.Contains(t, r.stdout, "usage: writefence blob put|get")
	for _, args := range [][]string{{"blob"}, {"blob", "-json"}, {"blob", "nope"}} {
		r = wf(t, args...)
		assert.Equal(t, exitUsage, r.code, "%v: %s", args, r)
		assert.Contains(t, r.stderr, "put or get", "%v", args)
	}
	for cmd, statuses := range map[string][]string{
		"blob put": {"exit 2", "exit 1", "exit 8", "exit 130"},
		"blob get": {"exit 3", "exit 6", "exit 5", "exit 1", "exit 2"},
		"commit":   {"exit 4", "exit 3", "exit 2", "exit 8", "exit 1"},
		"gc":       {"exit 6", "exit 5", "exit 1"},
	} {
		r = wf(t, "help", cmd)
		require.Equal(t, exitOK, r.code, "%s", r)
		help := strings.Join(strings.Fields(r.stdout), " ")
		for _, s := range statuses {
			assert.Contains(t, help, s, "help %s", cmd)
		}
	}
}
