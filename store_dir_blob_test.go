package writefence_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/keys"
)

// blobFile returns the path of the blob file of key in dir.
func blobFile(dir, key string) string {
	sum := sha256.Sum256([]byte(key))
	return filepath.Join(dir, "blobs", hex.EncodeToString(sum[:]))
}

// TestDirBlobMemory: a 40 MiB blob streams through the store's 256 KiB
// buffer.
func TestDirBlobMemory(t *testing.T) {
	testBlobMemory(t, newDirStore(t, t.TempDir()), 2*256<<10)
}

// TestDirBlobDamage: a blob file damaged on disk is never read as good
// bytes. The store checks its own CRC-32C over the file at the end of the
// data, and the file's length and header when it is opened, so the store
// catches the damage before the Fence's check of the bytes against their
// reference would; both fail the read with ErrCorrupt.
func TestDirBlobDamage(t *testing.T) {
	ctx := t.Context()
	const data = "the bytes of a segment, forty-two of them"
	cases := []struct {
		name   string
		damage func(b []byte) []byte
		check  string // the store's check that fails
		atOpen bool   // found when the blob is opened, not once it is read
	}{
		{"a data byte flipped", func(b []byte) []byte { b[len(b)-20] ^= 1; return b }, "dir store: blob checksum", false},
		{"the checksum flipped", func(b []byte) []byte { b[len(b)-1] ^= 1; return b }, "dir store: blob checksum", false},
		{"the length flipped", func(b []byte) []byte { b[len(b)-5] ^= 1; return b }, "dir store: blob length disagrees with the file's size", true},
		{"truncated", func(b []byte) []byte { return b[:len(b)-1] }, "dir store: blob length disagrees with the file's size", true},
		{"a byte appended", func(b []byte) []byte { return append(b, 0) }, "dir store: blob length disagrees with the file's size", true},
		{"the magic", func(b []byte) []byte { b[0] = 'X'; return b }, "dir store: blob magic", true},
		{"the format version", func(b []byte) []byte { b[4] = 9; return b }, "dir store: blob unknown format version", true},
		{"emptied", func([]byte) []byte { return nil }, "dir store: blob truncated file", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s := newDirStore(t, dir)
			f := &writefence.Fence{Store: s}
			ref := putBlob(t, f, "a", 1, data)
			require.NoError(t, f.Commit(ctx, "wal", "0", "a", 2, appendBlob(ref)))
			key, err := keys.Blob("", "wal", "0", ref.Name)
			require.NoError(t, err)
			file, err := os.ReadFile(blobFile(dir, key))
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(blobFile(dir, key), tc.damage(file), 0o600))

			var ce *writefence.CorruptError
			rc, _, err := s.OpenBlob(ctx, key)
			if tc.atOpen {
				wantStoreErr(t, err, "dir blob open", key, writefence.ErrCorrupt)
				_, err = s.StatBlob(ctx, key)
				wantStoreErr(t, err, "dir blob stat", key, writefence.ErrCorrupt)
			} else {
				require.NoError(t, err)
				_, err = io.ReadAll(rc)
				rc.Close()
				wantStoreErr(t, err, "dir blob read", key, writefence.ErrCorrupt)
			}
			require.ErrorAs(t, err, &ce)
			assert.Equal(t, tc.check, ce.Check)

			_, err = readBlob(t, f, ref.Name)
			require.ErrorIs(t, err, writefence.ErrCorrupt, "through the Fence")
			require.ErrorAs(t, err, &ce)
			assert.Equal(t, tc.check, ce.Check, "the store's check is the one that fires")
		})
	}
}

// TestDirBlobUnnamable: a blob file whose key cannot be read back, or that
// holds another key than its name's, is refused by OpenBlob and reported
// by ListBlobs, after the blobs it can list; one damaged beyond its key is
// listed, so that it can be collected.
func TestDirBlobUnnamable(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	s := newDirStore(t, dir)
	for _, k := range []string{"p/a", "p/b", "p/c", "p/d"} {
		_, err := s.CreateBlob(ctx, k, strings.NewReader("blob "+k))
		require.NoError(t, err)
	}
	b, err := os.ReadFile(blobFile(dir, "p/b"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(blobFile(dir, "p/c"), b, 0o600), "p/b's file under p/c's name")
	b[6] ^= 0xff // the key's length
	require.NoError(t, os.WriteFile(blobFile(dir, "p/a"), b, 0o600))
	require.NoError(t, os.Truncate(blobFile(dir, "p/d"), 10))

	_, _, err = s.OpenBlob(ctx, "p/c")
	wantStoreErr(t, err, "dir blob open", "p/c", writefence.ErrCorrupt)
	_, _, err = s.OpenBlob(ctx, "p/a")
	wantStoreErr(t, err, "dir blob open", "p/a", writefence.ErrCorrupt)
	_, err = s.StatBlob(ctx, "p/d")
	wantStoreErr(t, err, "dir blob stat", "p/d", writefence.ErrCorrupt)
	var listed []string
	err = s.ListBlobs(ctx, "", func(b writefence.BlobInfo) error { listed = append(listed, b.Key); return nil })
	require.ErrorIs(t, err, writefence.ErrCorrupt)
	slices.Sort(listed)
	assert.Equal(t, []string{"p/b", "p/d"}, listed)
	assert.Equal(t, 2, strings.Count(err.Error(), "holds no readable key of its name"), "each damaged file reported: %v", err)
}

// TestDirBlobReadOnly: a store opened read-only reads blobs and refuses to
// create or delete them; over a store written before it held blobs (no
// blobs/ directory), it finds none.
func TestDirBlobReadOnly(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	w := newDirStore(t, dir)
	_, err := w.CreateBlob(ctx, "b", strings.NewReader("bytes"))
	require.NoError(t, err)

	r, err := writefence.OpenDirStoreReadOnly(dir)
	require.NoError(t, err)
	_, err = r.CreateBlob(ctx, "c", strings.NewReader("x"))
	wantStoreErr(t, err, "dir blob create", "c", fs.ErrPermission)
	wantStoreErr(t, r.DeleteBlob(ctx, "b"), "dir blob delete", "b", fs.ErrPermission)
	size, _, _ := readBlobSum(t, r, "b")
	assert.Equal(t, int64(5), size)
	info, err := r.StatBlob(ctx, "b")
	require.NoError(t, err)
	assert.Equal(t, int64(5), info.Size)
	assert.Len(t, listBlobs(t, r, ""), 1)
	_, err = r.StatBlob(ctx, "c")
	require.ErrorIs(t, err, writefence.ErrNotFound, "nothing was created")

	f := &writefence.Fence{Store: r}
	_, err = f.PutBlob(ctx, "wal", "0", "a", 1, strings.NewReader("x"))
	require.ErrorIs(t, err, fs.ErrPermission, "a Fence over a read-only store")

	require.NoError(t, os.RemoveAll(filepath.Join(dir, "blobs")))
	r, err = writefence.OpenDirStoreReadOnly(dir)
	require.NoError(t, err)
	assert.Empty(t, listBlobs(t, r, ""))
	_, err = r.StatBlob(ctx, "b")
	require.ErrorIs(t, err, writefence.ErrNotFound)
	assert.NoDirExists(t, filepath.Join(dir, "blobs"), "a read-only store creates nothing")
}

// TestDirBlobHostileKeys: blob keys that look like paths stay inside
// blobs/, each in a file named by its hash, and are listed back as they
// were written.
func TestDirBlobHostileKeys(t *testing.T) {
	ctx := t.Context()
	parent := t.TempDir()
	dir := filepath.Join(parent, "store")
	s := newDirStore(t, dir)
	hostile := []string{
		"..", "../escape", "/etc/passwd", "a/../../b", ".tmp-x", "a\x00b", "a\nb",
		strings.Repeat("k", keys.MaxKeyLen), strings.Repeat("/..", keys.MaxKeyLen/3), "\xff\xfe",
	}
	for _, k := range hostile {
		_, err := s.CreateBlob(ctx, k, strings.NewReader("blob of "+k))
		require.NoError(t, err, "key %q", k)
	}
	got := listBlobs(t, s, "")
	assert.Len(t, got, len(hostile))
	for _, k := range hostile {
		assert.Contains(t, got, k)
		assert.FileExists(t, blobFile(dir, k))
	}
	entries, err := os.ReadDir(parent)
	require.NoError(t, err)
	require.Len(t, entries, 1, "nothing outside the store's directory")
	assert.Len(t, objectFiles(t, filepath.Join(dir, "blobs")), len(hostile))
	for _, k := range []string{"", strings.Repeat("k", keys.MaxKeyLen+1)} {
		_, err := s.CreateBlob(ctx, k, strings.NewReader("x"))
		wantStoreErr(t, err, "dir blob create", k, writefence.ErrInvalidArgument)
		_, err = s.StatBlob(ctx, k)
		wantStoreErr(t, err, "dir blob stat", k, writefence.ErrInvalidArgument)
	}
}

// TestDirBlobCreateRace: writers racing to create one blob key, through
// store values of their own (as processes would), each with its file
// written and durable before any of them links it: exactly one creates the
// blob, every other is refused with ErrConflict, the blob holds the
// winner's bytes, and no temporary file is left.
func TestDirBlobCreateRace(t *testing.T) {
	const writers = 8
	dir := t.TempDir()
	var arrived sync.WaitGroup
	arrived.Add(writers)
	release := make(chan struct{})
	writefence.HookDirBlobLink(t, func(*writefence.DirStore, string) {
		arrived.Done()
		<-release
	})
	stores := make([]*writefence.DirStore, writers)
	for i := range stores {
		stores[i] = newDirStore(t, dir)
	}
	errs := make([]error, writers)
	var done sync.WaitGroup
	for i, s := range stores {
		done.Go(func() {
			_, errs[i] = s.CreateBlob(context.Background(), "k", strings.NewReader(fmt.Sprintf("writer %d", i)))
		})
	}
	arrived.Wait()
	close(release)
	done.Wait()

	winner := -1
	for i, err := range errs {
		if err == nil {
			require.Equal(t, -1, winner, "two writers created the blob")
			winner = i
			continue
		}
		wantStoreErr(t, err, "dir blob create", "k", writefence.ErrConflict)
	}
	require.NotEqual(t, -1, winner, "no writer created the blob")
	rc, _, err := stores[0].OpenBlob(t.Context(), "k")
	require.NoError(t, err)
	defer rc.Close()
	b, err := io.ReadAll(rc)
	require.NoError(t, err)
	assert.Equal(t, fmt.Sprintf("writer %d", winner), string(b))
	assert.Empty(t, blobTemps(t, dir))
}

// cancellingReader yields its bytes, and cancels its context once it has
// given n of them.
type cancellingReader struct {
	r      io.Reader
	n      int
	cancel context.CancelFunc
}

// TestDirBlobCancelledMidway: a blob whose context is cancelled while it
// streams returns the context's error and leaves nothing behind.
func TestDirBlobCancelledMidway(t *testing.T) {
	dir := t.TempDir()
	s := newDirStore(t, dir)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	_, err := s.CreateBlob(ctx, "k", &cancellingReader{r: newPattern(1<<20, 1), n: 300 << 10, cancel: cancel})
	require.ErrorIs(t, err, context.Canceled)
	_, err = s.StatBlob(t.Context(), "k")
	require.ErrorIs(t, err, writefence.ErrNotFound)
	assert.Empty(t, blobTemps(t, dir))
}

// TestDirCollectDamagedBlobs: Collect is not stopped by blob files damaged
// beyond their key: it deletes a damaged blob no manifest can reference,
// and keeps a damaged referenced one, whose read fails as corrupt.
func TestDirCollectDamagedBlobs(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	f := &writefence.Fence{Store: newDirStore(t, dir)}
	kept := putBlob(t, f, "a", 1, "referenced")
	require.NoError(t, f.Commit(ctx, "wal", "0", "a", 2, appendBlob(kept)))
	dead := putBlob(t, f, "a", 3, "never committed")
	require.NoError(t, f.Seal(ctx, "wal", "0", "b", 4))
	for _, ref := range []writefence.BlobRef{kept, dead} {
		key, err := keys.Blob("", "wal", "0", ref.Name)
		require.NoError(t, err)
		st, err := os.Stat(blobFile(dir, key))
		require.NoError(t, err)
		require.NoError(t, os.Truncate(blobFile(dir, key), st.Size()-5), "the key stays whole")
	}
	report, err := f.Collect(ctx, "wal", "0", writefence.GCOptions{Grace: time.Hour})
	require.NoError(t, err)
	assert.Equal(t, sortedNames(dead), blobNames(report.Deleted))
	assert.Equal(t, sortedNames(kept), blobNames(report.Referenced))
	_, err = readBlob(t, f, kept.Name)
	require.ErrorIs(t, err, writefence.ErrCorrupt)
}
