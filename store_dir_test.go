package writefence_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/defaults"
	"github.com/writefence/writefence/internal/fakestore"
	"github.com/writefence/writefence/internal/hook"
	"github.com/writefence/writefence/internal/keys"
	"github.com/writefence/writefence/internal/testserver"
	"github.com/writefence/writefence/writefencetest"
)

// newDirStore opens the directory store in dir. On a system where the store
// cannot lock files the test is skipped; TestDirUnsupportedSystem checks
// the refusal.
func newDirStore(t testing.TB, dir string) *writefence.DirStore {
	t.Helper()
	s, err := writefence.NewDirStore(dir)
	if errors.Is(err, errors.ErrUnsupported) {
		t.Skip(err)
	}
	require.NoError(t, err)
	return s
}

// wantStoreErr fails the test unless err is a *StoreError of op on key
// that matches target.
func wantStoreErr(t *testing.T, err error, op, key string, target error) {
	t.Helper()
	var se *writefence.StoreError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, op, se.Op)
	assert.Equal(t, key, se.Key)
	assert.ErrorIs(t, err, target)
}

// TestDirUnsupportedSystem: where the store cannot lock files (faked
// here, since every system the tests run on has flock(2)), both
// constructors refuse with a *StoreError matching errors.ErrUnsupported
// that names the system, and create nothing.
func TestDirUnsupportedSystem(t *testing.T) {
	writefence.WithoutDirLocking(t)
	dir := filepath.Join(t.TempDir(), "store")
	_, err := writefence.NewDirStore(dir)
	wantStoreErr(t, err, "dir open", "", errors.ErrUnsupported)
	assert.Contains(t, err.Error(), "cannot lock files on "+runtime.GOOS)
	_, err = writefence.OpenDirStoreReadOnly(dir)
	wantStoreErr(t, err, "dir open", "", errors.ErrUnsupported)
	assert.NoDirExists(t, dir)
}

// TestDirConformance runs the conformance suite on one directory, through
// one store value and through a fresh value per subtest, with blobs of a
// few of the store's 256 KiB buffers and the store embedded in a wrapper
// of dirWrapper's type; nothing the kit did left a temporary blob file.
func TestDirConformance(t *testing.T) {
	t.Parallel()
	opts := func(dir string) *writefencetest.Options {
		o := kitOptions(testserver.DamageDir(dir))
		o.BlobPartSize = 256 << 10
		o.Wrap = func(s writefence.ConditionalStore, o *writefencetest.Overrides) writefence.ConditionalStore {
			return dirWrapper{s.(*writefence.DirStore), o}
		}
		return o
	}
	t.Run("Shared", func(t *testing.T) {
		dir := t.TempDir()
		s := newDirStore(t, dir)
		s.MaxObjectSize = kitReadLimit
		writefencetest.TestConditionalStore(t, func(*testing.T) writefence.ConditionalStore { return s }, opts(dir))
		assert.Empty(t, blobTemps(t, dir))
	})
	t.Run("Fresh", func(t *testing.T) {
		dir := t.TempDir()
		writefencetest.TestConditionalStore(t, func(t *testing.T) writefence.ConditionalStore {
			s := newDirStore(t, dir)
			s.MaxObjectSize = kitReadLimit
			return s
		}, opts(dir))
		assert.Empty(t, blobTemps(t, dir))
	})
}

// dirWrapper is a store that embeds the directory store and overrides Get
// and PutIfVersion, as a freeze or an audit log would (the kit's
// Fence/Overrides).
type dirWrapper struct {
	*writefence.DirStore
	o *writefencetest.Overrides
}

func (w dirWrapper) Get(ctx context.Context, key string) ([]byte, string, error) {
	return w.o.Get(ctx, key, w.DirStore.Get)
}

func (w dirWrapper) PutIfVersion(ctx context.Context, key string, data []byte, expect string) (string, error) {
	return w.o.PutIfVersion(ctx, key, data, expect, w.DirStore.PutIfVersion)
}

// objectFiles lists every file under root, relative to root.
func objectFiles(t *testing.T, root string) []string {
	t.Helper()
	var files []string
	require.NoError(t, filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(root, path)
		files = append(files, rel)
		return err
	}))
	return files
}

// TestDirHostileKeys: keys that look like paths, hold NUL or newlines, or
// are as long as a key may be stay inside the directory, each in its own
// file, and read back as written.
func TestDirHostileKeys(t *testing.T) {
	ctx := t.Context()
	parent := t.TempDir()
	dir := filepath.Join(parent, "store")
	s := newDirStore(t, dir)
	hostile := []string{
		"..", "../escape", "../../../../../../tmp/escape", "/etc/passwd", "a/../../b",
		".", "./", "a/b", "a%2Fb", "a\x00b", "a\nb", "lock", "objects", ".tmp-x",
		strings.Repeat("k", keys.MaxKeyLen), strings.Repeat("/..", keys.MaxKeyLen/3),
		strings.Repeat("é", keys.MaxKeyLen/2), "\xff\xfe",
	}
	versions := make(map[string]string)
	for _, k := range hostile {
		v, err := s.PutIfVersion(ctx, k, []byte("value of "+k), "")
		require.NoError(t, err, "key %q", k)
		versions[k] = v
	}
	for _, k := range hostile {
		data, v, err := s.Get(ctx, k)
		require.NoError(t, err, "key %q", k)
		assert.Equal(t, "value of "+k, string(data))
		assert.Equal(t, versions[k], v)
	}
	// Nothing outside the store's directory, one file per key inside it,
	// each named by the key's hash.
	entries, err := os.ReadDir(parent)
	require.NoError(t, err)
	require.Len(t, entries, 1)
	assert.Equal(t, "store", entries[0].Name())
	files := objectFiles(t, dir)
	assert.Len(t, files, len(hostile), "one file per key: %v", files)
	for _, k := range hostile {
		sum := sha256.Sum256([]byte(k))
		assert.Contains(t, files, filepath.Join("objects", hex.EncodeToString(sum[:])))
	}
	for _, k := range []string{"", strings.Repeat("k", keys.MaxKeyLen+1)} {
		_, err := s.PutIfVersion(ctx, k, nil, "")
		wantStoreErr(t, err, "dir put", k, writefence.ErrInvalidArgument)
		_, _, err = s.Get(ctx, k)
		wantStoreErr(t, err, "dir get", k, writefence.ErrInvalidArgument)
	}
}

// TestDirPersists: a second store value over the directory (as another
// process would open it) reads what the first wrote, and the first's token
// still conditions writes through the second.
func TestDirPersists(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	a := newDirStore(t, dir)
	v1, err := a.PutIfVersion(ctx, "k", []byte("one"), "")
	require.NoError(t, err)
	assert.Len(t, v1, 32, "a token is 16 random bytes in hex")

	b := newDirStore(t, dir)
	data, v, err := b.Get(ctx, "k")
	require.NoError(t, err)
	assert.Equal(t, "one", string(data))
	assert.Equal(t, v1, v)
	v2, err := b.PutIfVersion(ctx, "k", []byte("two"), v1)
	require.NoError(t, err)
	_, err = a.PutIfVersion(ctx, "k", []byte("stale"), v1)
	wantStoreErr(t, err, "dir put", "k", writefence.ErrConflict)

	// Delete and write the same bytes again: the token is new.
	require.NoError(t, a.Delete(ctx, "k"))
	require.NoError(t, a.Delete(ctx, "k"), "deleting a missing key is not an error")
	_, _, err = a.Get(ctx, "k")
	wantStoreErr(t, err, "dir get", "k", writefence.ErrNotFound)
	v3, err := a.PutIfVersion(ctx, "k", []byte("two"), "")
	require.NoError(t, err)
	assert.NotEqual(t, v2, v3)
}

// keyFile returns the path of key's object file in dir.
func keyFile(dir, key string) string {
	sum := sha256.Sum256([]byte(key))
	return filepath.Join(dir, "objects", hex.EncodeToString(sum[:]))
}

// putFile writes data at key through s and returns the object file and
// the version the write returned.
func putFile(t *testing.T, s *writefence.DirStore, dir, key string, data []byte) ([]byte, string) {
	t.Helper()
	v, err := s.PutIfVersion(t.Context(), key, data, "")
	require.NoError(t, err)
	file, err := os.ReadFile(keyFile(dir, key))
	require.NoError(t, err)
	return file, v
}

// wantDamaged fails the test unless both Get and GetPrefix of key report
// the damaged version of file, with check, and returns that error.
func wantDamaged(t *testing.T, s *writefence.DirStore, key string, file []byte, check string) *writefence.CorruptError {
	t.Helper()
	_, _, err := s.Get(t.Context(), key)
	wantStoreErr(t, err, "dir get", key, writefence.ErrCorrupt)
	assert.NotErrorIs(t, err, writefence.ErrNotFound)
	var ce *writefence.CorruptError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, damagedVersion(file), ce.Version, "the version names the damaged bytes")
	assert.Equal(t, key, ce.Key)
	assert.Contains(t, ce.Check, check)

	// However few bytes it asks for, GetPrefix has Get's verdict.
	_, _, _, err = s.GetPrefix(t.Context(), key, 1)
	var pce *writefence.CorruptError
	require.ErrorAs(t, err, &pce, "GetPrefix")
	assert.Equal(t, *ce, *pce)
	return ce
}

// TestDirCorruptFile: a damaged object file is reported as corrupt by Get
// and GetPrefix, and a write over it fails without matching ErrConflict.
func TestDirCorruptFile(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	s := newDirStore(t, dir)
	good, _ := putFile(t, s, dir, "k", []byte("payload"))

	flip := func(i int) []byte { return testserver.Flipped(good, i) }
	cases := map[string]struct {
		file      []byte
		check     string
		writeFail bool // the header is damaged, so the compare of a write fails too
	}{
		"empty":         {[]byte{}, "truncated file", true},
		"magic":         {flip(0), "magic", true},
		"version":       {flip(4), "unknown format version", true},
		"token":         {flip(5), "checksum", false},
		"key":           {flip(31), "another key", true},
		"data":          {flip(len(good) - 5), "checksum", false},
		"checksum":      {flip(len(good) - 1), "checksum", false},
		"truncated":     {good[:len(good)-2], "truncated file", false},
		"no checksum":   {good[:len(good)-4], "truncated file", false},
		"trailing":      {append(append([]byte(nil), good...), 0), "trailing bytes", false},
		"data too long": {good[:len(good)-6], "truncated file", false},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			require.NoError(t, os.WriteFile(keyFile(dir, "k"), c.file, 0o600))
			wantDamaged(t, s, "k", c.file, c.check)
			if c.writeFail {
				_, err := s.PutIfVersion(ctx, "k", []byte("x"), "")
				wantStoreErr(t, err, "dir put", "k", writefence.ErrCorrupt)
				assert.NotErrorIs(t, err, writefence.ErrConflict)
			}
		})
	}
}

// TestDirTooLarge: the read limit refuses big data without reading it,
// from Get and GetPrefix alike, and a write the store could never read back
// is refused.
func TestDirTooLarge(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	big := newDirStore(t, dir)
	_, err := big.PutIfVersion(ctx, "k", make([]byte, 11), "")
	require.NoError(t, err)

	small := newDirStore(t, dir)
	small.MaxObjectSize = 10
	_, _, err = small.Get(ctx, "k")
	wantStoreErr(t, err, "dir get", "k", writefence.ErrTooLarge)
	assert.Contains(t, err.Error(), "more than 10 bytes")
	_, _, _, err = small.GetPrefix(ctx, "k", 1)
	wantStoreErr(t, err, "dir get", "k", writefence.ErrTooLarge)

	_, err = small.PutIfVersion(ctx, "k2", make([]byte, 11), "")
	wantStoreErr(t, err, "dir put", "k2", writefence.ErrInvalidArgument)
	_, err = small.PutPartsIfVersion(ctx, "k2", [][]byte{make([]byte, 6), make([]byte, 5)}, "")
	wantStoreErr(t, err, "dir put", "k2", writefence.ErrInvalidArgument)
	_, err = small.PutIfVersion(ctx, "k2", make([]byte, 10), "")
	require.NoError(t, err)
}

// TestDirCreatesNestedDir: the directory and its parents are created, and
// an empty path is refused.
func TestDirCreatesNestedDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b")
	newDirStore(t, dir)
	assert.DirExists(t, filepath.Join(dir, "objects"))
	_, err := writefence.NewDirStore("")
	wantStoreErr(t, err, "dir open", "", writefence.ErrInvalidArgument)
}

// damagedVersion is the version the directory store reports for a damaged
// file: "damaged-" and the SHA-256 of the file's bytes.
func damagedVersion(b []byte) string {
	sum := sha256.Sum256(b)
	return "damaged-" + hex.EncodeToString(sum[:])
}

// TestDirDamageInPlace: a file damaged in place keeps the token inside it,
// so the store checks the whole file on Get, GetPrefix and the compare of
// a write. Get reports the damaged version; a write conditioned on the old
// token, or create-only, refuses with ErrCorrupt and writes nothing; a
// write conditioned on the damaged version replaces it.
func TestDirDamageInPlace(t *testing.T) {
	ctx := t.Context()
	for name, damage := range map[string]func(t *testing.T, dir string, good []byte) []byte{
		"flipped data byte": func(_ *testing.T, _ string, good []byte) []byte {
			b := append([]byte(nil), good...)
			b[len(b)-6] ^= 0x40
			return b
		},
		"truncated": func(_ *testing.T, _ string, good []byte) []byte { return good[:len(good)-3] },
		"garbage":   func(_ *testing.T, _ string, _ []byte) []byte { return []byte("not an object file at all") },
		"another key": func(t *testing.T, dir string, _ []byte) []byte {
			file, _ := putFile(t, newDirStore(t, dir), dir, "other", []byte("the payload"))
			return file
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			s := newDirStore(t, dir)
			good, old := putFile(t, s, dir, "k", []byte("the payload"))
			bad := damage(t, dir, good)
			require.NoError(t, os.WriteFile(keyFile(dir, "k"), bad, 0o600))

			ce := wantDamaged(t, s, "k", bad, "")
			assert.NotEqual(t, old, ce.Version)
			for _, expect := range []string{old, "", "damaged-" + strings.Repeat("0", 64)} {
				_, err := s.PutIfVersion(ctx, "k", []byte("overwrite"), expect)
				var refused *writefence.CorruptError
				require.ErrorAs(t, err, &refused, "expect %q", expect)
				assert.Equal(t, ce.Version, refused.Version)
				assert.NotErrorIs(t, err, writefence.ErrConflict)
				onDisk, err := os.ReadFile(keyFile(dir, "k"))
				require.NoError(t, err)
				assert.Equal(t, bad, onDisk, "nothing was written (expect %q)", expect)
			}

			v, err := s.PutIfVersion(ctx, "k", []byte("settled"), ce.Version)
			require.NoError(t, err)
			data, got, err := s.Get(ctx, "k")
			require.NoError(t, err)
			assert.Equal(t, "settled", string(data))
			assert.Equal(t, v, got)
			_, err = s.PutIfVersion(ctx, "k", []byte("again"), ce.Version)
			require.ErrorIs(t, err, writefence.ErrConflict, "the damaged version is gone")
		})
	}
}

// TestDirDamagedTwice: a damaged version conditions a write only while the
// file is exactly those bytes; a second edit makes the first damaged
// version refuse.
func TestDirDamagedTwice(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	s := newDirStore(t, dir)
	good, _ := putFile(t, s, dir, "k", []byte("the payload"))

	first := append([]byte(nil), good...)
	first[len(first)-6] ^= 0x01
	require.NoError(t, os.WriteFile(keyFile(dir, "k"), first, 0o600))
	firstVersion := wantDamaged(t, s, "k", first, "checksum").Version

	second := append([]byte(nil), good...)
	second[len(second)-7] ^= 0x01
	require.NoError(t, os.WriteFile(keyFile(dir, "k"), second, 0o600))
	_, err := s.PutIfVersion(ctx, "k", []byte("overwrite"), firstVersion)
	var ce *writefence.CorruptError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, damagedVersion(second), ce.Version, "the refusal names the bytes there now")
	onDisk, err := os.ReadFile(keyFile(dir, "k"))
	require.NoError(t, err)
	assert.Equal(t, second, onDisk, "nothing was written")
}

// TestDirDamageThroughFence: a fence that remembers the version of its own
// last push does not read before its next push; the store's check keeps
// that push from overwriting a file damaged since, and Settle at the
// damaged version replaces it.
func TestDirDamageThroughFence(t *testing.T) {
	ctx := t.Context()
	dir, s, f, _ := pushedDir(t, "a", 1)
	info, err := f.Inspect(ctx, "wal", "0")
	require.NoError(t, err)
	good := readKeyFile(t, dir, info.Key)
	bad := append([]byte(nil), good...)
	bad[len(bad)-6] ^= 0x40 // in the record's payload: the token stays
	require.NoError(t, os.WriteFile(keyFile(dir, info.Key), bad, 0o600))

	err = f.Push(ctx, "wal", "0", "a", 2, []byte("segment 2"))
	require.ErrorIs(t, err, writefence.ErrCorrupt)
	assert.Equal(t, bad, readKeyFile(t, dir, info.Key), "the damaged file was not overwritten")

	// A fresh fence reads the header alone, and the store's check of the
	// whole file still refuses.
	err = (&writefence.Fence{Store: s}).Push(ctx, "wal", "0", "b", 3, []byte("segment 3"))
	require.ErrorIs(t, err, writefence.ErrCorrupt)

	_, err = f.Inspect(ctx, "wal", "0")
	var ce *writefence.CorruptError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, damagedVersion(bad), ce.Version)
	require.NoError(t, f.Settle(ctx, "wal", "0", writefence.Settlement{Version: ce.Version, Writer: "operator", Epoch: 10, Payload: []byte("rebuilt")}))
	requireLatest(t, f, 10, "operator", "rebuilt")
}

// TestDirColdPush: over a 64 MiB record, a push by a fresh fence reads the
// record's head alone (the store checks the whole file on that read, as a
// store that keeps its version beside its bytes must, but returns the
// head) and allocates no copy of the old record and none of its own
// payload: the store checks the old file and writes the new one through
// fixed buffers. A stale push is refused from the record's header alone.
func TestDirColdPush(t *testing.T) {
	headReads := func(s fakestore.Store) int64 { return s.Calls(fakestore.Get) + s.Calls(fakestore.GetPrefix) }
	ctx := t.Context()
	// Counts the bytes the directory store's reads return to the fence,
	// as a ranged GET's body counts them on a network store.
	s := fakestore.New(newDirStore(t, t.TempDir()), fakestore.Options{})
	payload := make([]byte, 64<<20)
	for i := range payload {
		payload[i] = byte(i * 31)
	}
	require.NoError(t, (&writefence.Fence{Store: s}).Push(ctx, "wal", "0", "a", 1, payload))

	var before, after runtime.MemStats
	calls, read := headReads(s), s.BytesRead()
	runtime.ReadMemStats(&before)
	require.NoError(t, (&writefence.Fence{Store: s}).Push(ctx, "wal", "0", "b", 2, payload))
	runtime.ReadMemStats(&after)
	allocated := after.TotalAlloc - before.TotalAlloc
	assert.Equal(t, int64(1), headReads(s)-calls, "one read of the record it replaces")
	assert.LessOrEqual(t, s.BytesRead()-read, int64(defaults.MaxHeaderSize), "of its head alone")
	assert.Less(t, allocated, uint64(1<<20), "no copy of the old record, none of the new")
	t.Logf("cold push over a 64 MiB record: allocated %d bytes", allocated)

	calls, read = headReads(s), s.BytesRead()
	err := (&writefence.Fence{Store: s}).Push(ctx, "wal", "0", "c", 2, payload)
	require.ErrorIs(t, err, writefence.ErrStaleEpoch)
	assert.Equal(t, int64(1), headReads(s)-calls, "one read")
	assert.LessOrEqual(t, s.BytesRead()-read, int64(defaults.MaxHeaderSize), "of the header alone")

	requireLatest(t, &writefence.Fence{Store: s}, 2, "b", string(payload))
}

// TestDirReadOnly: the read-only open of a missing directory fails with
// fs.ErrNotExist and creates nothing; over a store it reads without taking
// the lock (its file may be absent) and refuses writes.
func TestDirReadOnly(t *testing.T) {
	ctx := t.Context()
	missing := filepath.Join(t.TempDir(), "none")
	_, err := writefence.OpenDirStoreReadOnly(missing)
	wantStoreErr(t, err, "dir open", "", fs.ErrNotExist)
	assert.NoDirExists(t, missing)

	dir := t.TempDir()
	w := newDirStore(t, dir)
	v, err := w.PutIfVersion(ctx, "k", []byte("x"), "")
	require.NoError(t, err)
	r, err := writefence.OpenDirStoreReadOnly(dir)
	require.NoError(t, err)
	data, got, err := r.Get(ctx, "k")
	require.NoError(t, err)
	assert.Equal(t, "x", string(data))
	assert.Equal(t, v, got)
	prefix, size, got, err := r.GetPrefix(ctx, "k", 8)
	require.NoError(t, err)
	assert.Equal(t, "x", string(prefix))
	assert.Equal(t, int64(1), size)
	assert.Equal(t, v, got)
	_, err = r.PutIfVersion(ctx, "k", []byte("y"), v)
	wantStoreErr(t, err, "dir put", "k", fs.ErrPermission)
	_, err = r.PutPartsIfVersion(ctx, "k", [][]byte{[]byte("y")}, v)
	wantStoreErr(t, err, "dir put", "k", fs.ErrPermission)
	wantStoreErr(t, r.Delete(ctx, "k"), "dir delete", "k", fs.ErrPermission)
}

// TestListers: MemStore and the directory store list the keys under a
// prefix, in lexical order; the directory store reports a file it cannot
// name as corrupt, with its damaged version, after listing the rest.
func TestListers(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	for name, s := range map[string]interface {
		writefence.ConditionalStore
		writefence.Lister
	}{"mem": &writefence.MemStore{}, "dir": newDirStore(t, dir)} {
		t.Run(name, func(t *testing.T) {
			for _, k := range []string{"p/b", "p/a", "q/a", "p/c/d"} {
				_, err := s.PutIfVersion(ctx, k, []byte("x"), "")
				require.NoError(t, err)
			}
			var got []string
			require.NoError(t, s.List(ctx, "p/", func(k string) error { got = append(got, k); return nil }))
			assert.Equal(t, []string{"p/a", "p/b", "p/c/d"}, got)
			stop := assert.AnError
			n := 0
			require.ErrorIs(t, s.List(ctx, "", func(string) error { n++; return stop }), stop)
			assert.Equal(t, 1, n, "List stops at fn's error")
		})
	}

	garbage := []byte("garbage")
	require.NoError(t, os.WriteFile(keyFile(dir, "lost"), garbage, 0o600))
	var got []string
	err := newDirStore(t, dir).List(ctx, "p/", func(k string) error { got = append(got, k); return nil })
	assert.Equal(t, []string{"p/a", "p/b", "p/c/d"}, got)
	wantStoreErr(t, err, "dir list", "", writefence.ErrCorrupt)
	var ce *writefence.CorruptError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, damagedVersion(garbage), ce.Version)
	assert.Contains(t, ce.Check, filepath.Base(keyFile(dir, "lost")))
}

// lockPolls returns a channel closed once s has found its lock taken by
// another open file n times: proof that a write of s is waiting for it.
func lockPolls(t *testing.T, s *writefence.DirStore, n int64) <-chan struct{} {
	t.Helper()
	polled := make(chan struct{})
	var busy atomic.Int64
	writefence.HookDirLockAttempts(t, func(st *writefence.DirStore, attempt func() (bool, error)) (bool, error) {
		locked, err := attempt()
		if st == s && !locked && err == nil && busy.Add(1) == n {
			close(polled)
		}
		return locked, err
	})
	return polled
}

// TestDirMovedWhileWriting: two store values over one directory race pushes
// at one epoch, both having read the absent record; while the first holds
// the lock, its compare passed and its file not yet written, objects/ is
// moved away and back. The second still waits for the first, then finds
// the record written and is refused as stale: exactly one push lands.
func TestDirMovedWhileWriting(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	a, b := newDirStore(t, dir), newDirStore(t, dir)

	aHolds, aGo := make(chan struct{}), make(chan struct{})
	var held sync.Once
	writefence.HookDirReplace(t, func(s *writefence.DirStore, _ string) {
		if s == a {
			held.Do(func() { close(aHolds); <-aGo })
		}
	})
	bPolled := lockPolls(t, b, 3)

	// Each push's first write waits until both have read; b's waits
	// further until objects/ has moved.
	var read sync.WaitGroup
	read.Add(2)
	bWrite := make(chan struct{})
	gate := func(then <-chan struct{}) context.Context {
		var first sync.Once
		return hook.With(ctx, &hook.Hooks{Write: func(_ context.Context, _ string, write func() (string, error)) (string, error) {
			first.Do(func() {
				read.Done()
				read.Wait()
				<-then
			})
			return write()
		}})
	}
	now := make(chan struct{})
	close(now)
	var errA, errB error
	aDone, bDone := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(aDone)
		errA = (&writefence.Fence{Store: a}).Push(gate(now), "wal", "0", "a", 1, []byte("by a"))
	})
	wg.Go(func() {
		defer close(bDone)
		errB = (&writefence.Fence{Store: b}).Push(gate(bWrite), "wal", "0", "b", 1, []byte("by b"))
	})

	select {
	case <-aHolds:
	case <-aDone:
		close(bWrite)
		wg.Wait()
		t.Fatalf("a's push ended without holding the lock at its write: %v", errA)
	}
	objects := filepath.Join(dir, "objects")
	assert.NoError(t, os.Rename(objects, objects+".away"))
	assert.NoError(t, os.Rename(objects+".away", objects))
	close(bWrite)
	select {
	case <-bPolled:
	case <-bDone:
		t.Error("b's push ended without waiting for the lock a holds")
	}
	close(aGo)
	wg.Wait()

	require.NoError(t, errA)
	require.ErrorIs(t, errB, writefence.ErrStaleEpoch, "exactly one push at epoch 1 lands")
	requireLatest(t, &writefence.Fence{Store: newDirStore(t, dir)}, 1, "a", "by a")
}

// TestDirReadOnlyPushIsFinal: a Fence over a store opened read-only is
// refused with fs.ErrPermission after one write attempt: a refusal, not a
// write whose outcome is unknown, and not retried.
func TestDirReadOnlyPushIsFinal(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	require.NoError(t, (&writefence.Fence{Store: newDirStore(t, dir)}).Push(ctx, "wal", "0", "a", 1, []byte("one")))
	r, err := writefence.OpenDirStoreReadOnly(dir)
	require.NoError(t, err)

	var writes atomic.Int64
	var events []writefence.WriteEvent
	f := &writefence.Fence{Store: r, Observer: func(_ context.Context, e writefence.WriteEvent) { events = append(events, e) }}
	counted := hook.With(ctx, &hook.Hooks{Write: func(_ context.Context, _ string, write func() (string, error)) (string, error) {
		writes.Add(1)
		return write()
	}})
	err = f.Push(counted, "wal", "0", "b", 2, []byte("two"))
	wantStoreErr(t, err, "dir put", mustKey(t, "wal", "0"), fs.ErrPermission)
	assert.NotErrorIs(t, err, writefence.ErrOutcomeUnknown)
	assert.Equal(t, int64(1), writes.Load(), "one write attempt")
	require.Len(t, events, 1)
	assert.Equal(t, 1, events[0].Attempt)
	requireLatest(t, f, 1, "a", "one")
}

// damageFile replaces the object file of key in dir with b.
func damageFile(t *testing.T, dir, key string, b []byte) {
	t.Helper()
	require.NoError(t, os.WriteFile(keyFile(dir, key), b, 0o600))
}

// readKeyFile returns the bytes of the object file of key in dir.
func readKeyFile(t *testing.T, dir, key string) []byte {
	t.Helper()
	b, err := os.ReadFile(keyFile(dir, key))
	require.NoError(t, err)
	return b
}

// pushedDir returns a directory store in a directory of the test's own and
// a Fence over it, once writer pushed "segment <epoch>" to shard wal/0 at
// epoch, and the shard's key.
func pushedDir(t *testing.T, writer string, epoch uint64) (dir string, s *writefence.DirStore, f *writefence.Fence, key string) {
	t.Helper()
	dir = t.TempDir()
	s = newDirStore(t, dir)
	f = &writefence.Fence{Store: s}
	key = mustKey(t, "wal", "0")
	require.NoError(t, f.Push(t.Context(), "wal", "0", writer, epoch, fmt.Appendf(nil, "segment %d", epoch)))
	return dir, s, f, key
}

// dirSnapshot returns every file under dir with its contents.
func dirSnapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	files := make(map[string]string)
	for _, name := range objectFiles(t, dir) {
		b, err := os.ReadFile(filepath.Join(dir, name))
		require.NoError(t, err)
		files[name] = string(b)
	}
	return files
}

// TestDirSettleDamagedPayload: a record whose payload was damaged in the
// file still shows its header through the store's CorruptError.Head, so
// its epoch and writer are known: a settle below the epoch and a deposed
// writer's push are refused without writing, a settle above it lands.
func TestDirSettleDamagedPayload(t *testing.T) {
	ctx := t.Context()
	dir, s, f, key := pushedDir(t, "w100", 100)
	record, _, err := s.Get(ctx, key)
	require.NoError(t, err)
	good := readKeyFile(t, dir, key)
	bad := testserver.Flipped(good, len(good)-5) // the payload's last byte
	damageFile(t, dir, key, bad)

	_, _, err = s.Get(ctx, key)
	var ce *writefence.CorruptError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, testserver.Flipped(record, len(record)-1), ce.Head, "the head is the damaged record, without the file's checksum")
	info, err := f.Inspect(ctx, "wal", "0")
	require.ErrorIs(t, err, writefence.ErrCorrupt)
	assert.Equal(t, uint64(100), info.Epoch)
	assert.Equal(t, "w100", info.Writer)
	assert.Equal(t, damagedVersion(bad), info.Version)

	before := dirSnapshot(t, dir)
	err = f.Settle(ctx, "wal", "0", writefence.Settlement{Version: info.Version, Writer: "op", Epoch: 5, Payload: []byte("rebuilt")})
	var stale *writefence.StaleEpochError
	require.ErrorAs(t, err, &stale)
	assert.Equal(t, uint64(100), stale.RecordedEpoch)
	assert.Equal(t, before, dirSnapshot(t, dir), "a refused settle writes nothing, not even its log entry")
	err = (&writefence.Fence{Store: s}).Push(ctx, "wal", "0", "deposed", 50, []byte("zombie"))
	require.ErrorIs(t, err, writefence.ErrCorrupt)
	assert.Equal(t, before, dirSnapshot(t, dir), "a push never overwrites a damaged record")

	require.NoError(t, f.Settle(ctx, "wal", "0", writefence.Settlement{Version: info.Version, Writer: "op", Epoch: 101, Payload: []byte("rebuilt")}))
	requireLatest(t, f, 101, "op", "rebuilt")
}

// TestDirSettleDamagedFraming: damage to the file's own framing (its magic)
// leaves the record's header where the key says the data starts, so Head
// holds it, a settle below its epoch is refused and one above lands with no
// floor; a file cut inside the record's header leaves none, and Settle
// needs a stated floor.
func TestDirSettleDamagedFraming(t *testing.T) {
	ctx := t.Context()
	dir, s, f, key := pushedDir(t, "a", 7)
	good := readKeyFile(t, dir, key)
	damageFile(t, dir, key, testserver.Flipped(good, 0)) // the file's magic

	_, _, err := s.Get(ctx, key)
	var ce *writefence.CorruptError
	require.ErrorAs(t, err, &ce)
	assert.NotEmpty(t, ce.Head)
	info, err := f.Inspect(ctx, "wal", "0")
	require.ErrorIs(t, err, writefence.ErrCorrupt)
	assert.Equal(t, uint64(7), info.Epoch)
	before := dirSnapshot(t, dir)
	err = f.Settle(ctx, "wal", "0", writefence.Settlement{Version: info.Version, Writer: "op", Epoch: 6, Payload: []byte("old")})
	require.ErrorIs(t, err, writefence.ErrStaleEpoch)
	assert.Equal(t, before, dirSnapshot(t, dir))
	require.NoError(t, f.Settle(ctx, "wal", "0", writefence.Settlement{Version: info.Version, Writer: "op", Epoch: 8, Payload: []byte("rebuilt")}))
	requireLatest(t, f, 8, "op", "rebuilt")

	// Cut inside the record's header: nothing of it can be read.
	now := readKeyFile(t, dir, key)
	damageFile(t, dir, key, now[:31+len(key)+10]) // 31: the file header before the key
	info, err = f.Inspect(ctx, "wal", "0")
	require.ErrorIs(t, err, writefence.ErrCorrupt)
	assert.Zero(t, info.Epoch)
	before = dirSnapshot(t, dir)
	err = f.Settle(ctx, "wal", "0", writefence.Settlement{Version: info.Version, Writer: "op", Epoch: 9, Payload: []byte("rebuilt")})
	var ia *writefence.InvalidArgumentError
	require.ErrorAs(t, err, &ia)
	assert.Equal(t, "floor", ia.Arg)
	assert.Equal(t, before, dirSnapshot(t, dir))
	require.NoError(t, f.Settle(ctx, "wal", "0", writefence.Settlement{Version: info.Version, Writer: "op", Epoch: 9, Payload: []byte("rebuilt"), Floor: 8}))
	requireLatest(t, f, 9, "op", "rebuilt")
}

// TestDirSettleRepeatedDamage: the same damage twice (a file truncated to
// nothing) has the same version; the settle log refuses the first settle
// run again over the second damage, and a settle above the epoch pushed
// since lands.
func TestDirSettleRepeatedDamage(t *testing.T) {
	ctx := t.Context()
	dir, _, f, key := pushedDir(t, "a", 5)
	damageFile(t, dir, key, nil)
	info, err := f.Inspect(ctx, "wal", "0")
	require.ErrorIs(t, err, writefence.ErrCorrupt)
	first := writefence.Settlement{Version: info.Version, Writer: "op", Epoch: 10, Payload: []byte("rebuilt"), Floor: 5}
	require.NoError(t, f.Settle(ctx, "wal", "0", first))
	require.NoError(t, f.Push(ctx, "wal", "0", "b", 20, []byte("segment 20")))

	damageFile(t, dir, key, nil)
	again, err := f.Inspect(ctx, "wal", "0")
	require.ErrorIs(t, err, writefence.ErrCorrupt)
	require.Equal(t, info.Version, again.Version, "the same damage, the same version")
	err = f.Settle(ctx, "wal", "0", first)
	require.ErrorIs(t, err, writefence.ErrStaleEpoch)
	assert.Empty(t, readKeyFile(t, dir, key), "the record stays damaged")

	require.NoError(t, f.Settle(ctx, "wal", "0", writefence.Settlement{Version: again.Version, Writer: "op", Epoch: 21, Payload: []byte("rebuilt again"), Floor: 20}))
	requireLatest(t, f, 21, "op", "rebuilt again")
}

// blobTemps returns the temporary blob files in dir.
func blobTemps(t *testing.T, dir string) []string {
	t.Helper()
	temps, err := filepath.Glob(filepath.Join(dir, "blobs", ".tmp-*"))
	require.NoError(t, err)
	return temps
}

// TestDirBlobTemps: a store that opens the directory removes a temporary
// blob file that a crashed writer left, once it is a minute old, and
// leaves alone one whose writer is still writing, however old, and a
// fresh one.
func TestDirBlobTemps(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	newDirStore(t, dir)
	old := time.Now().Add(-2 * time.Minute)
	crashed := filepath.Join(dir, "blobs", ".tmp-crashed")
	fresh := filepath.Join(dir, "blobs", ".tmp-fresh")
	for _, p := range []string{crashed, fresh} {
		require.NoError(t, os.WriteFile(p, []byte("half a blob"), 0o600))
	}
	require.NoError(t, os.Chtimes(crashed, old, old))

	// A write in progress, held before its link, its temporary file made
	// to look old.
	linking := make(chan struct{})
	release := make(chan struct{})
	writefence.HookDirBlobLink(t, func(*writefence.DirStore, string) {
		close(linking)
		<-release
	})
	w := newDirStore(t, dir)
	done := make(chan error, 1)
	go func() {
		_, err := w.CreateBlob(ctx, "live", strings.NewReader("a live write"))
		done <- err
	}()
	<-linking
	var live string
	for _, p := range blobTemps(t, dir) {
		if p != crashed && p != fresh {
			live = p
		}
	}
	require.NotEmpty(t, live)
	require.NoError(t, os.Chtimes(live, old, old))

	newDirStore(t, dir)
	assert.NoFileExists(t, crashed, "a crashed writer's file is removed")
	assert.FileExists(t, fresh, "a fresh file may be a writer's that has not locked it yet")
	assert.FileExists(t, live, "a live writer's file stays")
	close(release)
	require.NoError(t, <-done)
	size, _, _ := readBlobSum(t, w, "live")
	assert.Equal(t, int64(len("a live write")), size)
}

func (c *cancellingReader) Read(p []byte) (int, error) {
	if c.n <= 0 {
		c.cancel()
	}
	n, err := c.r.Read(p[:min(len(p), max(c.n, 1))])
	c.n -= n
	return n, err
}

// FuzzDirFile: whatever bytes an object's file holds, Get and GetPrefix
// neither panic nor guess: each returns the data and version a write
// would have left (both agreeing, GetPrefix's a prefix of Get's), or an
// error matching ErrCorrupt (or ErrTooLarge), and a write conditioned on
// a version Get did not return is refused, leaving the file as it was.
// The seeds are files the store
// wrote, whole and cut short.
func FuzzDirFile(f *testing.F) {
	const key = "writefence/s/wal/0"
	dir := f.TempDir()
	s, err := writefence.NewDirStore(dir)
	require.NoError(f, err)
	sum := sha256.Sum256([]byte(key))
	path := filepath.Join(dir, "objects", hex.EncodeToString(sum[:]))
	for _, data := range []string{"", "x", "a record's bytes", strings.Repeat("z", 5000)} {
		_, err := s.PutIfVersion(f.Context(), key, []byte(data), "")
		require.NoError(f, err)
		b, err := os.ReadFile(path)
		require.NoError(f, err)
		f.Add(b)
		f.Add(b[:len(b)/2])
		require.NoError(f, s.Delete(f.Context(), key))
	}
	f.Fuzz(func(t *testing.T, file []byte) {
		ctx := t.Context()
		require.NoError(t, os.WriteFile(path, file, 0o600))
		data, version, err := s.Get(ctx, key)
		prefix, size, pversion, perr := s.GetPrefix(ctx, key, 16)
		if err != nil {
			require.True(t, errors.Is(err, writefence.ErrCorrupt) || errors.Is(err, writefence.ErrTooLarge), "%v", err)
			require.Error(t, perr, "GetPrefix gives Get's verdict")
			_, werr := s.PutIfVersion(ctx, key, []byte("next"), "0123456789abcdef0123456789abcdef")
			require.True(t, errors.Is(werr, writefence.ErrConflict) || errors.Is(werr, writefence.ErrCorrupt), "a write over damage, on a version never returned: %v", werr)
			after, rerr := os.ReadFile(path)
			require.NoError(t, rerr)
			require.Equal(t, file, after, "the refused write left the file as it was")
			return
		}
		require.NoError(t, perr)
		assert.Equal(t, version, pversion)
		assert.Equal(t, int64(len(data)), size)
		assert.Equal(t, data[:min(len(data), 16)], prefix)
		_, werr := s.PutIfVersion(ctx, key, []byte("next"), version)
		require.NoError(t, werr, "the version Get returned is the file's")
	})
}

// TestDirDamagedLayoutKeepsRecordHeader: damage to the directory store's
// own file header (the magic, the format version, the key length, the data
// length, a byte of the stored key) leaves the record's header, intact on
// disk, readable from CorruptError.Head: the store takes the head where an
// intact file of the key has its data, whatever the damaged fields claim.
// So Inspect shows the record's epoch, and a Settle below it is refused:
// the recorded epoch never goes down, settles included.
//
// Sequence: Push at epoch 100; damage the object file in place, in the
// store's own header only; Inspect; Settle at epoch 2 with floor 1. Want:
// Inspect shows epoch 100, the settle is refused as stale, and Inspect
// still shows 100.
func TestDirDamagedLayoutKeepsRecordHeader(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(b []byte, keyLen int)
	}{
		// The data length, 8 bytes at offset 23, says 0: the head is cut to
		// nothing although the record is all there.
		{"data length zero", func(b []byte, _ int) { binary.BigEndian.PutUint64(b[23:], 0) }},
		// The data length says 10 bytes: the head is cut inside the header.
		{"data length short", func(b []byte, _ int) { binary.BigEndian.PutUint64(b[23:], 10) }},
		// One bit of the magic: no head at all, though the key and the
		// record follow in place.
		{"magic", func(b []byte, _ int) { b[0] ^= 1 }},
		// The format version byte: no head either.
		{"format version", func(b []byte, _ int) { b[4] ^= 1 }},
		// One bit of the key length: the key no longer matches, no head.
		{"key length", func(b []byte, _ int) { b[22] ^= 1 }},
		// One bit of the stored key itself (the store knows the key it
		// reads, so where the data starts is still known): no head.
		{"key byte", func(b []byte, _ int) { b[31] ^= 1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			store := newDirStore(t, dir)
			f := &writefence.Fence{Store: store}
			require.NoError(t, f.Push(ctx, "wal", "0", "writer-a", 100, []byte("the shard's state at epoch 100")))

			key := mustKey(t, "wal", "0")
			path := testserver.DirObjectFile(dir, key)
			b, err := os.ReadFile(path)
			require.NoError(t, err)
			keyLen := int(binary.BigEndian.Uint16(b[21:]))
			record := append([]byte(nil), b[31+keyLen:len(b)-4]...)
			tc.damage(b, keyLen)
			require.NoError(t, os.WriteFile(path, b, 0o600))
			// The record's own bytes are intact in the file.
			require.Equal(t, record, b[31+keyLen:len(b)-4])

			info, err := f.Inspect(ctx, "wal", "0")
			require.ErrorIs(t, err, writefence.ErrCorrupt)
			require.NotEmpty(t, info.Version)

			settleErr := f.Settle(ctx, "wal", "0", writefence.Settlement{
				Version: info.Version, Writer: "operator", Epoch: 2, Floor: 1, Payload: []byte("settled"),
			})
			// The refused settle leaves the damage in place, for Inspect.
			after, afterErr := f.Inspect(ctx, "wal", "0")

			assert.Equal(t, uint64(100), info.Epoch,
				"Inspect hides the epoch of a record header that is intact on disk")
			assert.ErrorIs(t, settleErr, writefence.ErrStaleEpoch,
				"Settle at epoch 2 over an intact header at epoch 100 must be refused")
			require.ErrorIs(t, afterErr, writefence.ErrCorrupt)
			require.GreaterOrEqual(t, after.Epoch, uint64(100), "the recorded epoch went down from 100 to %d", after.Epoch)
		})
	}
}

// TestDirLockHoldsWhilePathsMove: the directory store's exclusion does not
// depend on any path. Store values a and c are opened on one directory;
// objects/ is moved away and back (as a backup tool or an operator might);
// a pushes epoch 1, then pushes epoch 2 and holds the lock, compare passed,
// file not yet replaced; objects/ moves away and back again, and a file
// named lock (an older layout's lock file) comes and goes; c pushes epoch 2
// over the same record. c must wait for a, then be refused as stale:
// exactly one of the two pushes at epoch 2 returns nil, and it is the
// record that stays.
func TestDirLockHoldsWhilePathsMove(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	objects := filepath.Join(dir, "objects")
	move := func() {
		require.NoError(t, os.Rename(objects, objects+".away"))
		require.NoError(t, os.Rename(objects+".away", objects))
	}
	a, c := newDirStore(t, dir), newDirStore(t, dir)
	fa, fc := &writefence.Fence{Store: a}, &writefence.Fence{Store: c}

	move()
	require.NoError(t, fa.Push(ctx, "wal", "0", "a", 1, []byte("one")))

	var armed atomic.Bool
	aHolds, aGo := make(chan struct{}), make(chan struct{})
	var once sync.Once
	writefence.HookDirReplace(t, func(s *writefence.DirStore, _ string) {
		if s == a && armed.Load() {
			once.Do(func() { close(aHolds); <-aGo })
		}
	})
	armed.Store(true)
	var errA error
	done := make(chan struct{})
	go func() {
		defer close(done)
		errA = fa.Push(ctx, "wal", "0", "a", 2, []byte("by a"))
	}()
	select {
	case <-aHolds:
	case <-done:
		t.Fatalf("a's push ended without holding the lock: %v", errA)
	}
	move() // while a holds the lock
	require.NoError(t, os.WriteFile(filepath.Join(dir, "lock"), nil, 0o600))
	require.NoError(t, os.Remove(filepath.Join(dir, "lock")))

	cPolled := lockPolls(t, c, 3)
	cDone := make(chan error, 1)
	go func() { cDone <- fc.Push(ctx, "wal", "0", "c", 2, []byte("by c")) }()
	var errC error
	waited := false
	select {
	case errC = <-cDone: // c wrote while a held the lock
	case <-cPolled: // c waits for a, as it should
		waited = true
	}
	close(aGo)
	<-done
	if waited {
		errC = <-cDone
	}

	require.NoError(t, errA)
	assert.Error(t, errC, "c's push at epoch 2 must be refused (stale, after waiting for a's): two pushes at one epoch both returned nil")
	_, w, p, err := (&writefence.Fence{Store: newDirStore(t, dir)}).Latest(ctx, "wal", "0")
	require.NoError(t, err)
	if errC == nil {
		assert.Equal(t, "c", w, "c's acknowledged push was overwritten by %s's %q", w, p)
	}
}

// TestDirStoreOptions: the directory store's constructor reads the fields
// that name it, together: ReadOnly opens the existing store for reading
// (fs.ErrNotExist where there is none, fs.ErrPermission for every write)
// and MaxObjectSize is its read limit, whether or not it is read-only; a
// writable store refuses to write more.
func TestDirStoreOptions(t *testing.T) {
	ctx := t.Context()
	_, err := writefence.NewDirConditionalStore(filepath.Join(t.TempDir(), "none"), &writefence.StoreOptions{ReadOnly: true, MaxObjectSize: 10})
	if errors.Is(err, errors.ErrUnsupported) {
		t.Skip(err)
	}
	require.ErrorIs(t, err, fs.ErrNotExist)

	dir := t.TempDir()
	w, err := writefence.NewDirConditionalStore(dir, nil)
	require.NoError(t, err)
	v, err := w.PutIfVersion(ctx, "big", make([]byte, 20), "")
	require.NoError(t, err)

	small, err := writefence.NewDirConditionalStore(dir, &writefence.StoreOptions{MaxObjectSize: 10})
	require.NoError(t, err)
	_, _, err = small.Get(ctx, "big")
	require.ErrorIs(t, err, writefence.ErrTooLarge)
	_, err = small.PutIfVersion(ctx, "other", make([]byte, 11), "")
	require.Error(t, err, "a write over the limit is refused")
	_, _, err = small.Get(ctx, "other")
	require.ErrorIs(t, err, writefence.ErrNotFound, "and wrote nothing")

	r, err := writefence.NewDirConditionalStore(dir, &writefence.StoreOptions{ReadOnly: true, MaxObjectSize: 10})
	require.NoError(t, err)
	_, _, err = r.Get(ctx, "big")
	require.ErrorIs(t, err, writefence.ErrTooLarge, "the read-only store keeps the read limit")
	_, _, _, err = writefence.GetPrefix(ctx, r, "big", 30)
	require.ErrorIs(t, err, writefence.ErrTooLarge)
	_, err = r.PutIfVersion(ctx, "big", []byte("x"), v)
	require.ErrorIs(t, err, fs.ErrPermission)

	// A Fence over the read-only store: its push is refused, final.
	f := &writefence.Fence{Store: r}
	require.ErrorIs(t, f.Push(ctx, "wal", "0", "a", 1, []byte("x")), fs.ErrPermission)
}

// TestPromise7_DirRecordRewrittenWhole: a record written whole through the
// directory store by something outside the package (the store's framing
// and checksum sound, the record's payload failing the record's own
// checksum) is refused by Latest as corrupt, and a Push, which reads the
// head alone there, replaces it: promise 7's exception, on any store that
// reads prefixes. A byte changed in the file instead is damage the store
// finds, and a push over it is refused (TestDirDamageInPlace).
func TestPromise7_DirRecordRewrittenWhole(t *testing.T) {
	ctx := context.Background()
	store, err := writefence.NewDirConditionalStore(t.TempDir(), nil)
	require.NoError(t, err)
	key := mustKey(t, "wal", "0")
	// A payload longer than the head a push reads (4 KiB).
	state := bytes.Repeat([]byte("the shard's state "), 1000)
	require.NoError(t, (&writefence.Fence{Store: store}).Push(ctx, "wal", "0", "a", 5, state))

	// Something outside the package rewrites the record whole, through
	// the store: the header as it was, one byte of the payload changed.
	data, version, err := store.Get(ctx, key)
	require.NoError(t, err)
	data[len(data)-1] ^= 0xff
	_, err = store.PutIfVersion(ctx, key, data, version)
	require.NoError(t, err)

	f := &writefence.Fence{Store: store}
	_, _, _, err = f.Latest(ctx, "wal", "0")
	require.ErrorIs(t, err, writefence.ErrCorrupt, "the record does not decode")

	require.NoError(t, f.Push(ctx, "wal", "0", "b", 6, []byte("new")), "a push over a record rewritten whole")
	e, w, p, err := f.Latest(ctx, "wal", "0")
	require.NoError(t, err)
	assert.Equal(t, []any{uint64(6), "b", "new"}, []any{e, w, string(p)})
}
