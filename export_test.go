// What the package's external tests (package writefence_test, which may
// import the harness under internal/ that imports this package) reach of
// its internals: each name here stands for one unexported name, for tests
// only.
package writefence

import (
	"context"
	"strings"
	"testing"
	"time"
)

// DirStore is the directory store's own type, for the package's external
// tests, which build a store and then change its settings or call the
// methods its capabilities name.
type DirStore = dirStore

func NewDirStore(dir string) (*DirStore, error) { return openDirStore(dir) }

func OpenDirStoreReadOnly(dir string) (*DirStore, error) { return openDirStoreReadOnly(dir) }

// The directory store's seams, for the package's external tests. Each
// holds until the test ends; none may be used by parallel tests.

// HookDirLockAttempts makes every attempt of a directory store to take
// its lock go through wrap: attempt makes it and reports whether the store
// now holds the lock; wrap returns what the store is to see.
func HookDirLockAttempts(t testing.TB, wrap func(s *dirStore, attempt func() (bool, error)) (bool, error)) {
	dirTestHooks.tryLock = wrap
	t.Cleanup(func() { dirTestHooks.tryLock = nil })
}

// HookDirReplace runs hold in every directory store write that holds the
// lock and whose compare passed, right before the key's file is replaced.
func HookDirReplace(t testing.TB, hold func(s *dirStore, key string)) {
	dirTestHooks.replace = hold
	t.Cleanup(func() { dirTestHooks.replace = nil })
}

// WithoutDirLocking makes the directory store act as on a system without
// flock(2).
func WithoutDirLocking(t testing.TB) {
	dirLockSupported = false
	t.Cleanup(func() { dirLockSupported = dirHasFlock })
}

// HookDirBlobLink runs hold in every directory store CreateBlob whose
// temporary file is durable, right before it is linked into place.
func HookDirBlobLink(t testing.TB, hold func(s *dirStore, key string)) {
	dirTestHooks.blobLink = hold
	t.Cleanup(func() { dirTestHooks.blobLink = nil })
}

// DeposedContexts is how many Deposed contexts f holds registered.
func DeposedContexts(f *Fence) int {
	f.deposed.mu.Lock()
	defer f.deposed.mu.Unlock()
	return len(f.deposed.waiting)
}

// DamageMemBlob replaces the bytes of the blob of m whose key ends in
// name with what edit makes of a copy of them.
func DamageMemBlob(m *MemStore, name string, edit func([]byte) []byte) {
	m.blobs.mu.Lock()
	defer m.blobs.mu.Unlock()
	for k, b := range m.blobs.blobs {
		if strings.HasSuffix(k, name) {
			b.data = edit(append([]byte(nil), b.data...))
			m.blobs.blobs[k] = b
		}
	}
}

// BlobIDs is the maker of a Fence's blob ids.
type BlobIDs = blobIDs

func (ids *blobIDs) Next(now time.Time) (string, error) { return ids.next(now) }
func (ids *blobIDs) Latest(now time.Time) string        { return ids.latest(now) }
func (ids *blobIDs) SetRandom(r [10]byte)               { ids.rand = r }

// AheadListing is a listing started beside a commit's read.
type AheadListing = aheadListing

// EndedAheadListing is a complete listing of prefix, ended, that found
// nothing.
func EndedAheadListing(prefix string) *AheadListing {
	l := &aheadListing{prefix: prefix, done: make(chan struct{}), found: map[string]BlobInfo{}, complete: true}
	close(l.done)
	return l
}

func (l *aheadListing) Wait(ctx context.Context, prefixes []string) (found map[string]BlobInfo, complete, ok bool) {
	return l.wait(ctx, prefixes)
}

// WriteChecked is how many bytes of a record every store checks on a
// write.
const WriteChecked = writeChecked

// NamesBytes, embedded in a test's store, declares that the store's
// versions name its bytes, as S3's and GCS's do.
type NamesBytes struct{}

func (NamesBytes) versionNamesBytes() {}
