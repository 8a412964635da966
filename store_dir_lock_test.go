package writefence_test

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
)

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
