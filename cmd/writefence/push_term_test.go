package main

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
)

const term3 = 3 << 32 // the first epoch of term 3, less one

// TestPushTerm: push -term draws strictly rising epochs of its term across
// separate runs, continuing above the seal of the term by the same writer;
// once a later term has written the shard it is refused as stale (exit 4),
// writing nothing, and says to stop.
func TestPushTerm(t *testing.T) {
	addr := fileStore(t)
	p := writeFile(t, "snapshot")
	push := func(args ...string) result {
		return wf(t, append(append([]string{"push", "-store", addr}, args...), "wal", "0")...)
	}
	r := push("-writer", "a", "-term", "3", "-file", p)
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.Equal(t, "landed: writefence/s/wal/0 epoch 12884901889 (term 3, #1) by a, 8 bytes\n", r.stdout)
	for n := 2; n <= 4; n++ {
		r = push("-json", "-writer", "a", "-term", "3", "-file", p)
		require.Equal(t, exitOK, r.code, "%s", r)
		assert.EqualValues(t, term3+n, jsonOf(t, r)["epoch"], "run %d", n)
	}

	// A later term seals the shard: the term's pushes are refused from now on.
	require.Equal(t, exitOK, push("-writer", "b", "-epoch", itoa(4<<32|1), "-file", p).code)
	for range 2 {
		r = push("-json", "-writer", "a", "-term", "3", "-file", p)
		assert.Equal(t, exitStale, r.code, "%s", r)
		assert.Equal(t, "stale", jsonOf(t, r)["outcome"])
		assert.Equal(t, "writefence: push refused: term 3 is over, writefence/s/wal/0 records epoch 17179869185 of term 4 by b: the lease was lost, stop writing\n", r.stderr)
	}
	r = wf(t, "latest", "-json", "-store", addr, "wal", "0")
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.EqualValues(t, 4<<32|1, jsonOf(t, r)["epoch"], "nothing written by the refused pushes")

	// A record of the term by another writer: not this writer's term.
	r = wf(t, "push", "-store", addr, "-writer", "c", "-term", "4", "-file", p, "wal", "0")
	assert.Equal(t, exitStale, r.code, "%s", r)
	assert.Contains(t, r.stderr, "two writers in one term")
}

// TestPushTermEnvironment: under writefence exec, -writer and -prefix
// come from the environment exec sets, and flags given win.
func TestPushTermEnvironment(t *testing.T) {
	addr := fileStore(t)
	p := writeFile(t, "snapshot")
	t.Setenv(envStore, addr)
	t.Setenv(envHolder, "node-a")
	t.Setenv(envPrefix, "app")
	r := wf(t, "push", "-json", "-term", "2", "-file", p, "wal", "0")
	require.Equal(t, exitOK, r.code, "%s", r)
	m := jsonOf(t, r)
	assert.Equal(t, "node-a", m["writer"])
	assert.Equal(t, "app/s/wal/0", m["key"])
	assert.EqualValues(t, 2<<32|1, m["epoch"])

	r = wf(t, "push", "-json", "-term", "2", "-writer", "node-b", "-prefix", "other", "-file", p, "wal", "0")
	require.Equal(t, exitOK, r.code, "%s", r)
	m = jsonOf(t, r)
	assert.Equal(t, "node-b", m["writer"])
	assert.Equal(t, "other/s/wal/0", m["key"])

	t.Setenv(envHolder, "")
	r = wf(t, "push", "-term", "2", "-file", p, "wal", "0")
	assert.Equal(t, exitUsage, r.code, "%s", r)
	assert.Contains(t, r.stderr, envHolder)
}

func TestPushTermUsage(t *testing.T) {
	addr := emptyStore(t)
	p := writeFile(t, "x")
	for _, args := range [][]string{
		{"-writer", "a", "-term", "1", "-epoch", "5"},
		{"-writer", "a", "-term", "4294967296"},
		{"-writer", "a", "-term", "-1"},
		{"-writer", "a", "-term", "0x10"},
		{"-writer", "a", "-term", ""},
	} {
		r := wf(t, append(append([]string{"push", "-store", addr, "-file", p}, args...), "wal", "s")...)
		assert.Equal(t, exitUsage, r.code, "%v: %s", args, r)
	}
	t.Run("a prefix refused in the environment", func(t *testing.T) {
		t.Setenv(envPrefix, "app/_x")
		r := wf(t, "push", "-store", addr, "-file", p, "-writer", "a", "-term", "1", "wal", "s")
		assert.Equal(t, exitUsage, r.code, "%s", r)
		assert.Contains(t, r.stderr, envPrefix+"=app/_x")
	})
	assert.Equal(t, exitNotFound, wf(t, "latest", "-store", addr, "wal", "s").code, "nothing written")
	r := wf(t, "push", "-store", addr, "-file", p, "-writer", "a", "-term", "4294967295", "wal", "s")
	assert.Equal(t, exitOK, r.code, "the last term: %s", r)
	r = wf(t, "push", "-store", addr, "-file", p, "-writer", "a", "-term", "0", "wal", "t")
	assert.Equal(t, exitOK, r.code, "term 0, as a control plane's first term may be: %s", r)
	assert.Contains(t, r.stdout, "epoch 1 (term 0, #1)")
}

// interloper is a store that, before the first write of a key, lets
// another writer's push land there: the race between a push's read and
// its write.
type interloper struct {
	writefence.ConditionalStore
	key    string
	before func(ctx context.Context)
	done   atomic.Bool
}

func (s *interloper) PutIfVersion(ctx context.Context, key string, data []byte, expect string) (string, error) {
	if key == s.key && s.done.CompareAndSwap(false, true) {
		s.before(ctx)
	}
	return s.ConditionalStore.PutIfVersion(ctx, key, data, expect)
}

// TestPushTermOwnRace: a push of the term that loses to another push of the
// same term and writer (the program pushing the shard from two processes)
// draws again above it and lands; one that loses to a later term is
// refused.
func TestPushTermOwnRace(t *testing.T) {
	for _, c := range []struct {
		name          string
		writer        string
		epoch         uint64
		landed        bool
		want, landing uint64
	}{
		{"same term and writer", "a", term3 + 2, true, term3 + 3, term3 + 3},
		{"a later term", "b", 4<<32 | 1, false, 0, 4<<32 | 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := t.Context()
			mem := &writefence.MemStore{}
			direct := &writefence.Fence{Store: mem}
			require.NoError(t, direct.Push(ctx, "wal", "0", "a", term3+1, []byte("seal")))
			s := &interloper{ConditionalStore: mem, key: "writefence/s/wal/0", before: func(ctx context.Context) {
				require.NoError(t, direct.Push(ctx, "wal", "0", c.writer, c.epoch, []byte("the other")))
			}}
			epoch, err := pushTerm(ctx, &writefence.Fence{Store: s}, 3, "wal", "0", "a", []byte("mine"))
			recorded, _, payload, lerr := direct.Latest(ctx, "wal", "0")
			require.NoError(t, lerr)
			if !c.landed {
				require.ErrorIs(t, err, writefence.ErrStaleEpoch)
				code, _ := classify(err)
				assert.Equal(t, exitStale, code)
				assert.Equal(t, c.landing, recorded)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, c.want, epoch)
			assert.Equal(t, c.landing, recorded)
			assert.Equal(t, "mine", string(payload))
		})
	}
}

// interloping://N is the interloper a test registered as N.
var interloping struct {
	mu     sync.Mutex // guards stores
	stores map[string]*interloper
}

func init() {
	openers["interloping"] = func(_ context.Context, u *url.URL) (*opened, error) {
		interloping.mu.Lock()
		defer interloping.mu.Unlock()
		s, ok := interloping.stores[u.Host]
		if !ok {
			return nil, fmt.Errorf("no interloper %q", u.Host)
		}
		return &opened{store: s, close: noClose}, nil
	}
}

// TestCommitTermOwnRace: a commit -term that loses to a commit of the same
// term and writer (the program committing from two processes) draws again
// above it and lands there, on the manifest the other wrote: both blobs
// referenced, -json naming the epoch it landed at and its own blob alone
// as added.
func TestCommitTermOwnRace(t *testing.T) {
	ctx := t.Context()
	blobs, mem, _ := sharedMem(t)
	direct := &writefence.Fence{Store: mem}
	require.NoError(t, direct.Push(ctx, "wal", "0", "a", term3+1, []byte("seal")))
	r := wf(t, "blob", "put", "-store", blobs, "-writer", "a", "-term", "3", "-file", writeFile(t, "mine"), "wal", "0")
	require.Equal(t, exitOK, r.code, "%s", r)
	mine := strings.TrimSpace(r.stdout)
	other, err := direct.PutBlob(ctx, "wal", "0", "a", term3+2, strings.NewReader("the other"))
	require.NoError(t, err)
	s := &interloper{ConditionalStore: mem, key: "writefence/s/wal/0", before: func(ctx context.Context) {
		require.NoError(t, direct.Commit(ctx, "wal", "0", "a", term3+2, func(m writefence.Manifest) (writefence.Manifest, error) {
			return writefence.Manifest{Payload: []byte("the other's"), Blobs: append(m.Blobs, other)}, nil
		}))
	}}
	interloping.mu.Lock()
	if interloping.stores == nil {
		interloping.stores = map[string]*interloper{}
	}
	interloping.stores[t.Name()] = s
	interloping.mu.Unlock()
	t.Cleanup(func() {
		interloping.mu.Lock()
		delete(interloping.stores, t.Name())
		interloping.mu.Unlock()
	})

	r = wf(t, "commit", "-json", "-store", "interloping://"+t.Name(), "-blobs", blobs, "-writer", "a", "-term", "3", "-add", mine, "-keep-payload", "wal", "0")
	require.Equal(t, exitOK, r.code, "%s", r)
	require.True(t, s.done.Load(), "the other commit landed first")
	m := jsonOf(t, r)
	assert.EqualValues(t, term3+3, m["epoch"])
	assert.Equal(t, []any{nameOf(mine)}, m["added"])
	assert.Equal(t, []any{newBlobRef(other).Ref, mine}, refsOf(m))
	epoch, _, payload, err := direct.Latest(ctx, "wal", "0")
	require.NoError(t, err)
	assert.EqualValues(t, term3+3, epoch)
	assert.Equal(t, "the other's", string(payload), "-keep-payload kept the other's")
}

// TestPushTermHelp: push's help says how -term is used under exec.
func TestPushTermHelp(t *testing.T) {
	r := wf(t, "help", "push")
	require.Equal(t, exitOK, r.code)
	for _, s := range []string{"-term", "WRITEFENCE_TERM", "writefence exec"} {
		assert.True(t, strings.Contains(r.stdout, s), "%s", s)
	}
}

// TestBlobAndCommitTerm: under writefence exec, blob put -term and commit
// -term draw their epochs as push -term does, from the environment exec
// sets: the blobs put before a commit are of the epoch the commit lands
// at, one above the term's last, so a shell shipper needs no epoch
// arithmetic; once a later term has written the shard both are refused
// as stale (exit 4), writing nothing.
func TestBlobAndCommitTerm(t *testing.T) {
	addr := fileStore(t)
	t.Setenv(envStore, addr)
	t.Setenv(envHolder, "node-a")
	put := func(data string) result {
		return wf(t, "blob", "put", "-json", "-term", "3", "-file", writeFile(t, data), "wal", "0")
	}
	for n := 1; n <= 2; n++ {
		var refs []string
		for i := range 2 {
			r := put(fmt.Sprintf("segment %d.%d", n, i))
			require.Equal(t, exitOK, r.code, "%s", r)
			assert.EqualValues(t, term3+n, jsonOf(t, r)["epoch"], "blob %d of commit %d", i, n)
			refs = append(refs, jsonOf(t, r)["ref"].(string))
		}
		r := wf(t, "commit", "-json", "-term", "3", "-add", refs[0], "-add", refs[1], "-keep-payload", "wal", "0")
		require.Equal(t, exitOK, r.code, "%s", r)
		m := jsonOf(t, r)
		assert.EqualValues(t, term3+n, m["epoch"], "commit %d", n)
		assert.Equal(t, "node-a", m["writer"])
		assert.Len(t, m["blobs"], 2*n)
	}

	// A later term takes the shard: the term's blob put and commit are
	// refused, and nothing is written.
	require.Equal(t, exitOK, wf(t, "commit", "-writer", "node-b", "-epoch", itoa(4<<32|1), "-keep-payload", "wal", "0").code)
	r := put("late")
	assert.Equal(t, exitStale, r.code, "%s", r)
	assert.Contains(t, r.stderr, "writefence: blob put refused: term 3 is over")
	r = wf(t, "commit", "-term", "3", "-keep-payload", "wal", "0")
	assert.Equal(t, exitStale, r.code, "%s", r)
	assert.Contains(t, r.stderr, "writefence: commit refused: term 3 is over")
	r = wf(t, "latest", "-json", "wal", "0")
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.EqualValues(t, 4<<32|1, jsonOf(t, r)["epoch"])

	for _, args := range [][]string{
		{"blob", "put", "-term", "3", "-epoch", "5", "-file", writeFile(t, "x")},
		{"commit", "-term", "3", "-epoch", "5", "-keep-payload"},
	} {
		r := wf(t, append(args, "wal", "0")...)
		assert.Equal(t, exitUsage, r.code, "%v: %s", args, r)
	}
	t.Setenv(envHolder, "")
	r = wf(t, "commit", "-term", "3", "-keep-payload", "wal", "0")
	assert.Equal(t, exitUsage, r.code, "%s", r)
	assert.Contains(t, r.stderr, envHolder)
}

// TestTermOnlyWhereTaken: a command without -term (seal, settle) that is
// missing -epoch asks for -epoch alone, never for a -term it refuses;
// push, blob put and commit name both.
func TestTermOnlyWhereTaken(t *testing.T) {
	addr := fileStore(t)
	p := writeFile(t, "x")
	for _, c := range []struct {
		args []string
		term bool
	}{
		{[]string{"seal", "-writer", "a"}, false},
		{[]string{"settle", "-writer", "a", "-confirm-version", "v", "-file", p}, false},
		{[]string{"push", "-writer", "a", "-file", p}, true},
		{[]string{"blob", "put", "-writer", "a", "-file", p}, true},
		{[]string{"commit", "-writer", "a", "-keep-payload"}, true},
	} {
		r := wf(t, append(append(c.args, "-store", addr), "wal", "0")...)
		assert.Equal(t, exitUsage, r.code, "%v: %s", c.args, r)
		assert.Contains(t, r.stderr, "-epoch", "%v", c.args)
		if c.term {
			assert.Contains(t, r.stderr, "-term", "%v", c.args)
		} else {
			assert.NotContains(t, r.stderr, "-term", "%v: the command takes no -term", c.args)
		}
	}
}
