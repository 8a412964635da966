//go:build unix

package writefence_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/keys"
	"github.com/writefence/writefence/writefencetest"
)

func newDirStore(t testing.TB, dir string) *writefence.DirConditionalStore {
	t.Helper()
	s, err := writefence.NewDirConditionalStore(dir)
	require.NoError(t, err)
	return s
}

// TestDirConformance runs the conformance suite on one directory, through
// one store value and through a fresh value per subtest.
func TestDirConformance(t *testing.T) {
	t.Run("Shared", func(t *testing.T) {
		s := newDirStore(t, t.TempDir())
		writefencetest.TestConditionalStore(t, func(*testing.T) writefence.ConditionalStore { return s })
	})
	t.Run("Fresh", func(t *testing.T) {
		dir := t.TempDir()
		writefencetest.TestConditionalStore(t, func(t *testing.T) writefence.ConditionalStore { return newDirStore(t, dir) })
	})
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
	keys := []string{
		"..", "../escape", "../../../../../../tmp/escape", "/etc/passwd", "a/../../b",
		".", "./", "a/b", "a%2Fb", "a\x00b", "a\nb", "lock", "objects", ".tmp-x",
		strings.Repeat("k", keys.MaxKeyLen), strings.Repeat("/..", keys.MaxKeyLen/3),
		strings.Repeat("é", keys.MaxKeyLen/2), "\xff\xfe",
	}
	versions := make(map[string]string)
	for _, k := range keys {
		v, err := s.PutIfVersion(ctx, k, []byte("value of "+k), "")
		require.NoError(t, err, "key %q", k)
		versions[k] = v
	}
	for _, k := range keys {
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
	assert.Len(t, files, len(keys)+1, "one file per key and the lock file: %v", files)
	for _, k := range keys {
		sum := sha256.Sum256([]byte(k))
		assert.Contains(t, files, filepath.Join("objects", hex.EncodeToString(sum[:])))
	}
	for _, k := range []string{"", strings.Repeat("k", 1025)} {
		_, err := s.PutIfVersion(ctx, k, nil, "")
		assert.ErrorIs(t, err, writefence.ErrInvalidArgument)
		_, _, err = s.Get(ctx, k)
		assert.ErrorIs(t, err, writefence.ErrInvalidArgument)
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
	require.ErrorIs(t, err, writefence.ErrConflict)

	// Delete and write the same bytes again: the token is new.
	require.NoError(t, a.Delete(ctx, "k"))
	require.NoError(t, a.Delete(ctx, "k"), "deleting a missing key is not an error")
	v3, err := a.PutIfVersion(ctx, "k", []byte("two"), "")
	require.NoError(t, err)
	assert.NotEqual(t, v2, v3)
}

// keyFile returns the path of key's object file in dir.
func keyFile(dir, key string) string {
	sum := sha256.Sum256([]byte(key))
	return filepath.Join(dir, "objects", hex.EncodeToString(sum[:]))
}

// TestDirCorruptFile: a damaged object file is reported as corrupt by Get,
// and a write over it fails without matching ErrConflict.
func TestDirCorruptFile(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	s := newDirStore(t, dir)
	_, err := s.PutIfVersion(ctx, "k", []byte("payload"), "")
	require.NoError(t, err)
	good, err := os.ReadFile(keyFile(dir, "k"))
	require.NoError(t, err)

	flip := func(i int) []byte {
		b := append([]byte(nil), good...)
		b[i] ^= 0x01
		return b
	}
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
			_, _, err := s.Get(ctx, "k")
			require.ErrorIs(t, err, writefence.ErrCorrupt)
			assert.Contains(t, err.Error(), c.check)
			assert.NotErrorIs(t, err, writefence.ErrNotFound)
			if c.writeFail {
				_, err = s.PutIfVersion(ctx, "k", []byte("x"), "")
				require.ErrorIs(t, err, writefence.ErrCorrupt)
				assert.NotErrorIs(t, err, writefence.ErrConflict)
			}
		})
	}
}

// TestDirTooLarge: the read limit refuses big data without reading it, and
// a write the store could never read back is refused.
func TestDirTooLarge(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	big := newDirStore(t, dir)
	_, err := big.PutIfVersion(ctx, "k", make([]byte, 11), "")
	require.NoError(t, err)

	small := newDirStore(t, dir)
	small.MaxObjectSize = 10
	_, _, err = small.Get(ctx, "k")
	var tl *writefence.StoreError
	require.ErrorAs(t, err, &tl)
	assert.Contains(t, tl.Error(), fmt.Sprintf("more than %d bytes", 10))
	assert.Equal(t, "k", tl.Key)

	_, err = small.PutIfVersion(ctx, "k2", make([]byte, 11), "")
	require.ErrorIs(t, err, writefence.ErrInvalidArgument)
	_, err = small.PutIfVersion(ctx, "k2", make([]byte, 10), "")
	require.NoError(t, err)
}

// TestDirLockWaitHonoursContext: while another open file holds the lock (as
// another process would), a write waits, and gives up when its context
// ends, writing nothing; once the lock is free it lands.
func TestDirLockWaitHonoursContext(t *testing.T) {
	dir := t.TempDir()
	s := newDirStore(t, dir)
	lock, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_RDWR, 0)
	require.NoError(t, err)
	defer lock.Close()
	require.NoError(t, syscall.Flock(int(lock.Fd()), syscall.LOCK_EX))

	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = s.PutIfVersion(ctx, "k", []byte("x"), "")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.GreaterOrEqual(t, time.Since(start), 50*time.Millisecond)
	_, _, err = s.Get(t.Context(), "k")
	require.ErrorIs(t, err, writefence.ErrNotFound, "reads take no lock")

	var wg sync.WaitGroup
	wg.Go(func() {
		time.Sleep(20 * time.Millisecond)
		assert.NoError(t, syscall.Flock(int(lock.Fd()), syscall.LOCK_UN))
	})
	_, err = s.PutIfVersion(t.Context(), "k", []byte("x"), "")
	require.NoError(t, err)
	wg.Wait()
}

// TestDirRemovesStaleTemps: a temporary file a crashed writer left is
// removed by the next open, unless a writer holds the lock.
func TestDirRemovesStaleTemps(t *testing.T) {
	dir := t.TempDir()
	newDirStore(t, dir)
	stale := filepath.Join(dir, "objects", ".tmp-123")
	require.NoError(t, os.WriteFile(stale, []byte("half"), 0o600))

	lock, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_RDWR, 0)
	require.NoError(t, err)
	require.NoError(t, syscall.Flock(int(lock.Fd()), syscall.LOCK_EX))
	newDirStore(t, dir)
	assert.FileExists(t, stale, "a temporary file may be a live write while the lock is held")
	require.NoError(t, lock.Close())

	newDirStore(t, dir)
	assert.NoFileExists(t, stale)
}

// TestDirCreatesNestedDir: the directory and its parents are created, and
// an empty path is refused.
func TestDirCreatesNestedDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b")
	s := newDirStore(t, dir)
	assert.Equal(t, dir, s.Dir())
	assert.DirExists(t, filepath.Join(dir, "objects"))
	_, err := writefence.NewDirConditionalStore("")
	require.ErrorIs(t, err, writefence.ErrInvalidArgument)
}

// damagedVersion is the version the directory store reports for a damaged
// file: "damaged-" and the SHA-256 of the file's bytes.
func damagedVersion(b []byte) string {
	sum := sha256.Sum256(b)
	return "damaged-" + hex.EncodeToString(sum[:])
}

// TestDirDamageInPlace: a file damaged in place keeps the token inside it,
// so the store checks the whole file on Get and on the compare of a write.
// Get reports the damaged version; a write conditioned on the old token,
// or create-only, refuses with ErrCorrupt and writes nothing; a write
// conditioned on the damaged version replaces it.
func TestDirDamageInPlace(t *testing.T) {
	ctx := t.Context()
	for name, damage := range map[string]func(t *testing.T, dir string, good []byte) []byte{
		"flipped data byte": func(_ *testing.T, _ string, good []byte) []byte {
			b := append([]byte(nil), good...)
			b[len(b)-6] ^= 0x40
			return b
		},
		"truncated":   func(_ *testing.T, _ string, good []byte) []byte { return good[:len(good)-3] },
		"garbage":     func(_ *testing.T, _ string, _ []byte) []byte { return []byte("not an object file at all") },
		"another key": anotherKeyFile,
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			s := newDirStore(t, dir)
			old, err := s.PutIfVersion(ctx, "k", []byte("the payload"), "")
			require.NoError(t, err)
			good, err := os.ReadFile(keyFile(dir, "k"))
			require.NoError(t, err)
			bad := damage(t, dir, good)
			require.NoError(t, os.WriteFile(keyFile(dir, "k"), bad, 0o600))

			_, _, err = s.Get(ctx, "k")
			var ce *writefence.CorruptError
			require.ErrorAs(t, err, &ce)
			require.ErrorIs(t, err, writefence.ErrCorrupt)
			assert.Equal(t, damagedVersion(bad), ce.Version, "the version names the damaged bytes")
			assert.NotEqual(t, old, ce.Version)
			assert.Equal(t, "k", ce.Key)

			for _, expect := range []string{old, "", "damaged-" + strings.Repeat("0", 64)} {
				_, err = s.PutIfVersion(ctx, "k", []byte("overwrite"), expect)
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

// anotherKeyFile returns the file another key's write produces, to be put
// at k's name.
func anotherKeyFile(t *testing.T, dir string, _ []byte) []byte {
	s := newDirStore(t, dir)
	_, err := s.PutIfVersion(t.Context(), "other", []byte("the payload"), "")
	require.NoError(t, err)
	b, err := os.ReadFile(keyFile(dir, "other"))
	require.NoError(t, err)
	return b
}

// TestDirDamagedTwice: a damaged version conditions a write only while the
// file is exactly those bytes; a second edit makes the first damaged
// version refuse.
func TestDirDamagedTwice(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	s := newDirStore(t, dir)
	_, err := s.PutIfVersion(ctx, "k", []byte("the payload"), "")
	require.NoError(t, err)
	good, err := os.ReadFile(keyFile(dir, "k"))
	require.NoError(t, err)

	first := append([]byte(nil), good...)
	first[len(first)-6] ^= 0x01
	require.NoError(t, os.WriteFile(keyFile(dir, "k"), first, 0o600))
	_, _, err = s.Get(ctx, "k")
	var ce *writefence.CorruptError
	require.ErrorAs(t, err, &ce)
	firstVersion := ce.Version

	second := append([]byte(nil), good...)
	second[len(second)-7] ^= 0x01
	require.NoError(t, os.WriteFile(keyFile(dir, "k"), second, 0o600))
	_, err = s.PutIfVersion(ctx, "k", []byte("overwrite"), firstVersion)
	require.ErrorIs(t, err, writefence.ErrCorrupt)
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
	dir := t.TempDir()
	s := newDirStore(t, dir)
	f := &writefence.Fence{Store: s}
	require.NoError(t, f.Push(ctx, "wal", "s", "a", 1, []byte("segment 1")))
	key, err := keys.Shard("", "wal", "s")
	require.NoError(t, err)
	good, err := os.ReadFile(keyFile(dir, key))
	require.NoError(t, err)
	bad := append([]byte(nil), good...)
	bad[len(bad)-6] ^= 0x40 // in the record's payload: the token stays
	require.NoError(t, os.WriteFile(keyFile(dir, key), bad, 0o600))

	err = f.Push(ctx, "wal", "s", "a", 2, []byte("segment 2"))
	require.ErrorIs(t, err, writefence.ErrCorrupt)
	onDisk, err := os.ReadFile(keyFile(dir, key))
	require.NoError(t, err)
	assert.Equal(t, bad, onDisk, "the damaged file was not overwritten")

	_, err = f.Inspect(ctx, "wal", "s")
	var ce *writefence.CorruptError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, damagedVersion(bad), ce.Version)
	require.NoError(t, f.Settle(ctx, "wal", "s", ce.Version, "operator", 10, []byte("rebuilt")))
	epoch, writer, payload, err := f.Latest(ctx, "wal", "s")
	require.NoError(t, err)
	assert.Equal(t, uint64(10), epoch)
	assert.Equal(t, "operator", writer)
	assert.Equal(t, "rebuilt", string(payload))
}

// TestDirReadOnly: the read-only open of a missing directory fails with
// fs.ErrNotExist and creates nothing; over a store it reads without taking
// the lock (its file may be absent) and refuses writes.
func TestDirReadOnly(t *testing.T) {
	ctx := t.Context()
	missing := filepath.Join(t.TempDir(), "none")
	_, err := writefence.OpenDirConditionalStoreReadOnly(missing)
	require.ErrorIs(t, err, fs.ErrNotExist)
	assert.NoDirExists(t, missing)

	dir := t.TempDir()
	w := newDirStore(t, dir)
	v, err := w.PutIfVersion(ctx, "k", []byte("x"), "")
	require.NoError(t, err)
	require.NoError(t, os.Remove(filepath.Join(dir, "lock")))

	r, err := writefence.OpenDirConditionalStoreReadOnly(dir)
	require.NoError(t, err)
	data, got, err := r.Get(ctx, "k")
	require.NoError(t, err)
	assert.Equal(t, "x", string(data))
	assert.Equal(t, v, got)
	_, err = r.PutIfVersion(ctx, "k", []byte("y"), v)
	require.ErrorIs(t, err, fs.ErrPermission)
	require.ErrorIs(t, r.Delete(ctx, "k"), fs.ErrPermission)
	assert.NoFileExists(t, filepath.Join(dir, "lock"), "a read takes no lock")
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
	var ce *writefence.CorruptError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, damagedVersion(garbage), ce.Version)
	assert.Contains(t, ce.Check, filepath.Base(keyFile(dir, "lost")))
}
