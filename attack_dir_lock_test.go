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

// Breaks promise 7 (the directory store's mutual exclusion holds even if
// the lock file is removed while held) for a store value opened before the
// removal, which the store's documentation says keeps waiting for the
// write that holds the lock; and with it promises 1 and 2: two pushes at
// one epoch both return nil, and the first acknowledged one is lost.
//
// A store value waits for a write only if the file it has open is the file
// that write holds. A value keeps the lock file it opened until it next
// writes, so after one removal that nobody noticed (an operator's cleanup,
// a tmp reaper) the values diverge: a value that wrote since has the new
// lock file, one that did not still has the old one. When the new file is
// then removed while its holder writes, the other value takes the old
// file, which nobody holds, sees that the path no longer names it, and
// creates a third file at the path, which it locks at once: two writers
// hold "the" lock, and both compare and rename.
//
// Sequence: open stores a and c on one directory; remove the lock file;
// a pushes epoch 1 (and so locks a new lock file); a pushes epoch 2 and
// holds its lock, compare passed, file not yet replaced; the lock file is
// removed again; c pushes epoch 2 over the same record: it lands and
// returns nil; a's push is let go: it lands and returns nil too, and
// replaces c's acknowledged record.
func TestAttackDirLockFileRemovedTwice(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	lock := filepath.Join(dir, "lock")
	a, c := newDirStore(t, dir), newDirStore(t, dir)
	fa, fc := &writefence.Fence{Store: a}, &writefence.Fence{Store: c}

	require.NoError(t, os.Remove(lock)) // nobody holds it
	require.NoError(t, fa.Push(ctx, "wal", "0", "a", 1, []byte("one")))

	var armed atomic.Bool
	aHolds, aGo := make(chan struct{}), make(chan struct{})
	var once sync.Once
	writefence.HookDirReplace(t, func(s *writefence.DirConditionalStore, _ string) {
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
	require.NoError(t, os.Remove(lock)) // removed while a holds it

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
