//go:build darwin || dragonfly || freebsd || illumos || linux || netbsd || openbsd

package writefence

import (
	"io/fs"
	"os"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDirFlock: of two open files of one directory, as two store values
// (or processes) hold, one takes the lock and the other is told, without
// an error, that it is taken, until the holder unlocks or closes its file.
func TestDirFlock(t *testing.T) {
	dir := t.TempDir()
	open := func() *os.File {
		f, err := os.Open(dir)
		require.NoError(t, err)
		t.Cleanup(func() { f.Close() })
		return f
	}
	a, b := open(), open()
	try := func(f *os.File) bool {
		t.Helper()
		locked, err := dirTryLock(f)
		require.NoError(t, err)
		return locked
	}

	require.True(t, try(a))
	assert.False(t, try(b), "held by a")
	require.NoError(t, dirUnlock(a))
	require.True(t, try(b), "a unlocked")
	assert.False(t, try(a), "held by b")
	require.NoError(t, b.Close())
	assert.True(t, try(a), "b's file closed")
}

// TestDirReadOnlyFSError: a file system mounted read-only is told apart from
// the other refusals of a write.
func TestDirReadOnlyFSError(t *testing.T) {
	for err, want := range map[error]bool{
		&fs.PathError{Op: "open", Path: "x", Err: syscall.EROFS}:  true,
		&fs.PathError{Op: "open", Path: "x", Err: syscall.EACCES}: false,
		syscall.ENOSPC: false,
	} {
		assert.Equal(t, want, dirReadOnlyFS(err), "%v", err)
	}
}
