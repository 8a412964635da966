package writefence

import "testing"

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
