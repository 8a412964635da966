//go:build darwin || dragonfly || freebsd || illumos || linux || netbsd || openbsd

package writefence_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/hook"
)

// dirChildEnv, when set, makes TestHelperDirProcess act as one contending
// process; its value is "dir,barrierDir,proc,procs,workers,rounds".
const dirChildEnv = "WRITEFENCE_DIR_CHILD"

// TestDirProcessRace: several OS processes, each with several goroutines,
// push the same epoch through their own Fence and their own store value
// over one directory, round after round. Exactly one push per round may
// land, every other must be refused as stale. Each round starts behind a
// barrier of files so the processes meet in the store together.
func TestDirProcessRace(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts child processes")
	}
	const procs, workers, rounds = 4, 8, 12
	dir := t.TempDir()
	barrier := t.TempDir()
	newDirStore(t, dir)

	outs := make([][]byte, procs)
	errs := make([]error, procs)
	var wg sync.WaitGroup
	for p := range procs {
		cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestHelperDirProcess$", "-test.count=1")
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s,%s,%d,%d,%d,%d", dirChildEnv, dir, barrier, p, procs, workers, rounds))
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		wg.Go(func() {
			outs[p], errs[p] = cmd.Output()
			if errs[p] != nil {
				errs[p] = fmt.Errorf("%w; stderr: %s", errs[p], stderr.String())
			}
		})
	}
	wg.Wait()

	landed := make(map[int][]string) // round -> writers whose push landed
	var stale, results int
	for p, out := range outs {
		require.NoError(t, errs[p], "child %d; stdout: %s", p, out)
		sc := bufio.NewScanner(bytes.NewReader(out))
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) != 4 || f[0] != "result" {
				continue
			}
			results++
			round, err := strconv.Atoi(f[1])
			require.NoError(t, err)
			switch f[3] {
			case "landed":
				landed[round] = append(landed[round], f[2])
			case "stale":
				stale++
			default:
				t.Errorf("round %d writer %s: %s", round, f[2], f[3])
			}
		}
	}
	require.Equal(t, procs*workers*rounds, results, "every push reported")
	for r := 1; r <= rounds; r++ {
		assert.Len(t, landed[r], 1, "round %d: pushes that landed: %v", r, landed[r])
	}
	assert.Equal(t, rounds*(procs*workers-1), stale)

	f := &writefence.Fence{Store: newDirStore(t, dir)}
	epoch, writer, payload, err := f.Latest(t.Context(), "wal", "0")
	require.NoError(t, err)
	assert.Equal(t, uint64(rounds), epoch)
	require.Len(t, landed[rounds], 1)
	assert.Equal(t, landed[rounds][0], writer)
	assert.Equal(t, fmt.Sprintf("round %d by %s", rounds, writer), string(payload))
	t.Logf("%d processes x %d goroutines, %d rounds: %d pushes, %d landed (one per round), %d stale",
		procs, workers, rounds, results, len(landed), stale)
}

// TestHelperDirProcess is one process of TestDirProcessRace; run on its
// own it does nothing.
func TestHelperDirProcess(t *testing.T) {
	spec := os.Getenv(dirChildEnv)
	if spec == "" {
		t.Skip("a child process of TestDirProcessRace")
	}
	parts := strings.Split(spec, ",")
	require.Len(t, parts, 6)
	dir, barrier := parts[0], parts[1]
	var n [4]int
	for i := range n {
		v, err := strconv.Atoi(parts[2+i])
		require.NoError(t, err)
		n[i] = v
	}
	proc, procs, workers, rounds := n[0], n[1], n[2], n[3]

	// A store value and a Fence per goroutine, so goroutines of one process
	// contend on the file lock as separate processes do.
	fences := make([]*writefence.Fence, workers)
	for i := range fences {
		fences[i] = &writefence.Fence{Store: newDirStore(t, dir)}
	}
	for r := 1; r <= rounds; r++ {
		waitBarrier(t, barrier, r, proc, procs)
		errs := together(workers, func(i int) error {
			w := fmt.Sprintf("p%dg%d", proc, i)
			return fences[i].Push(t.Context(), "wal", "0", w, uint64(r), fmt.Appendf(nil, "round %d by %s", r, w))
		})
		for i, err := range errs {
			outcome := "landed"
			switch {
			case errors.Is(err, writefence.ErrStaleEpoch):
				outcome = "stale"
			case err != nil:
				outcome = strconv.Quote(err.Error())
				outcome = strings.ReplaceAll(outcome, " ", "_")
			}
			fmt.Printf("result %d p%dg%d %s\n", r, proc, i, outcome)
		}
	}
}

// waitBarrier announces that proc reached round and waits until all procs
// have.
func waitBarrier(t *testing.T, dir string, round, proc, procs int) {
	t.Helper()
	require.NoError(t, os.WriteFile(filepath.Join(dir, fmt.Sprintf("r%d-p%d", round, proc)), nil, 0o600))
	deadline := time.Now().Add(time.Minute)
	for {
		matches, err := filepath.Glob(filepath.Join(dir, fmt.Sprintf("r%d-p*", round)))
		require.NoError(t, err)
		if len(matches) == procs {
			return
		}
		require.True(t, time.Now().Before(deadline), "round %d: %d of %d processes at the barrier", round, len(matches), procs)
		time.Sleep(200 * time.Microsecond)
	}
}

// holdLock takes the store's lock in dir through a file of its own, as
// another process would, and returns the release.
func holdLock(t *testing.T, dir string) (release func()) {
	t.Helper()
	lock, err := os.Open(filepath.Join(dir, "objects"))
	require.NoError(t, err)
	t.Cleanup(func() { lock.Close() })
	require.NoError(t, syscall.Flock(int(lock.Fd()), syscall.LOCK_EX))
	return func() { assert.NoError(t, syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)) }
}

// putAsync starts a write of key through s and returns where its error
// arrives.
func putAsync(t *testing.T, s *writefence.DirStore, key string) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := s.PutIfVersion(t.Context(), key, []byte("x"), "")
		done <- err
	}()
	return done
}

// requireWaiting fails the test unless the write reporting on done is
// still waiting once polled is closed.
func requireWaiting(t *testing.T, polled <-chan struct{}, done <-chan error) {
	t.Helper()
	select {
	case err := <-done:
		t.Fatalf("the write did not wait for the lock: %v", err)
	case <-polled:
	}
}

// TestDirLockWaitHonoursContext: while another open file holds the lock (as
// another process would), a write waits, and gives up when its context
// ends, writing nothing; once the lock is free it lands.
func TestDirLockWaitHonoursContext(t *testing.T) {
	dir := t.TempDir()
	s := newDirStore(t, dir)
	release := holdLock(t, dir)

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	polled := lockPolls(t, s, 3)
	go func() {
		select {
		case <-polled:
			cancel()
		case <-ctx.Done():
		}
	}()
	_, err := s.PutIfVersion(ctx, "k", []byte("x"), "")
	require.ErrorIs(t, err, context.Canceled)
	_, _, err = s.Get(t.Context(), "k")
	require.ErrorIs(t, err, writefence.ErrNotFound, "nothing was written; reads take no lock")

	polled = lockPolls(t, s, 3)
	done := putAsync(t, s, "k")
	requireWaiting(t, polled, done)
	release()
	require.NoError(t, <-done)
}

// TestDirReplacedWhileHeld: another process holds the lock, and objects/
// is moved away and an empty directory put in its place. A write of a
// store opened before still waits for that holder, and lands in the
// directory it opened, not in the new one: a store value's lock and its
// files are one directory, whatever the path names since.
func TestDirReplacedWhileHeld(t *testing.T) {
	dir := t.TempDir()
	objects := filepath.Join(dir, "objects")
	s := newDirStore(t, dir)
	release := holdLock(t, dir)
	require.NoError(t, os.Rename(objects, objects+".away"))
	require.NoError(t, os.Mkdir(objects, 0o700))

	polled := lockPolls(t, s, 3)
	done := putAsync(t, s, "k")
	requireWaiting(t, polled, done)
	release()
	require.NoError(t, <-done)
	entries, err := os.ReadDir(objects)
	require.NoError(t, err)
	assert.Empty(t, entries, "the write went to the directory the store opened")
	_, _, err = s.Get(t.Context(), "k")
	require.NoError(t, err, "the store reads the directory it writes")

	require.NoError(t, os.Remove(objects))
	require.NoError(t, os.Rename(objects+".away", objects))
	_, _, err = newDirStore(t, dir).Get(t.Context(), "k")
	require.NoError(t, err)
}

// dirROFSEnv, when set, makes TestHelperDirReadOnlyFS run in a mount
// namespace of its own, over the directory it names.
const dirROFSEnv = "WRITEFENCE_DIR_ROFS"

// TestDirReadOnlyFileSystem: a write refused because the store's file
// system is mounted read-only is final, as a permission refusal is: one
// attempt, an error matching fs.ErrPermission, never an unknown outcome.
// The remount needs a mount namespace of its own (unshare(1) and the
// right to mount); without it the test is skipped.
func TestDirReadOnlyFileSystem(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a child process")
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("no unshare(1):", err)
	}
	cmd := exec.CommandContext(t.Context(), unshare, "--mount", "--propagation", "private",
		os.Args[0], "-test.run=^TestHelperDirReadOnlyFS$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), dirROFSEnv+"="+t.TempDir())
	out, err := cmd.CombinedOutput()
	switch {
	case !bytes.Contains(out, []byte("=== RUN   TestHelperDirReadOnlyFS")):
		t.Skipf("no mount namespace: %v: %s", err, out)
	case bytes.Contains(out, []byte("--- SKIP: TestHelperDirReadOnlyFS")):
		t.Skipf("%s", out)
	}
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "--- PASS: TestHelperDirReadOnlyFS")
}

// TestHelperDirReadOnlyFS is the child of TestDirReadOnlyFileSystem: it
// mounts a file system of its own at the directory, opens a store there,
// remounts it read-only, and writes. Run on its own it does nothing.
func TestHelperDirReadOnlyFS(t *testing.T) {
	dir := os.Getenv(dirROFSEnv)
	if dir == "" {
		t.Skip("a child process of TestDirReadOnlyFileSystem")
	}
	ctx := t.Context()
	// A file system of its own, so that remounting it read-only reaches
	// the directory the open store already holds, as a file system that
	// turns read-only on an error does.
	if out, err := exec.Command("mount", "-t", "tmpfs", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("mount tmpfs: %v: %s", err, out)
	}
	s := newDirStore(t, dir)
	f := &writefence.Fence{Store: s}
	require.NoError(t, f.Push(ctx, "wal", "0", "a", 1, []byte("one")))
	if out, err := exec.Command("mount", "-o", "remount,ro", dir).CombinedOutput(); err != nil {
		t.Skipf("remount read-only: %v: %s", err, out)
	}

	var writes atomic.Int64
	counted := hook.With(ctx, &hook.Hooks{Write: func(_ context.Context, _ string, write func() (string, error)) (string, error) {
		writes.Add(1)
		return write()
	}})
	err := f.Push(counted, "wal", "0", "b", 2, []byte("two"))
	wantStoreErr(t, err, "dir put", mustKey(t, "wal", "0"), fs.ErrPermission)
	assert.ErrorIs(t, err, syscall.EROFS)
	assert.NotErrorIs(t, err, writefence.ErrOutcomeUnknown)
	assert.Equal(t, int64(1), writes.Load(), "one write attempt")
	requireLatest(t, f, 1, "a", "one")

	wantStoreErr(t, s.Delete(ctx, mustKey(t, "wal", "0")), "dir delete", mustKey(t, "wal", "0"), fs.ErrPermission)
	// A store opened now opens (reads work), and its writes are refused
	// the same way.
	again := newDirStore(t, dir)
	_, err = again.PutIfVersion(ctx, "k", []byte("x"), "")
	wantStoreErr(t, err, "dir put", "k", fs.ErrPermission)
	requireLatest(t, &writefence.Fence{Store: again}, 1, "a", "one")
}

// TestDirRemovesStaleTemps: a temporary file a crashed writer left is
// removed by the next open, unless a writer holds the lock.
func TestDirRemovesStaleTemps(t *testing.T) {
	dir := t.TempDir()
	newDirStore(t, dir)
	stale := filepath.Join(dir, "objects", ".tmp-123")
	require.NoError(t, os.WriteFile(stale, []byte("half"), 0o600))

	release := holdLock(t, dir)
	newDirStore(t, dir)
	assert.FileExists(t, stale, "a temporary file may be a live write while the lock is held")
	release()

	newDirStore(t, dir)
	assert.NoFileExists(t, stale)
}
