//go:build unix

package writefence

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// DirConditionalStore is a ConditionalStore over a directory of the local
// file system, correct across goroutines and across processes of one host
// that open the same directory. It is the persistent store for a single
// machine: tests, demos and deployments whose writers share a disk.
//
// Layout under the directory:
//
//	lock                the store's lock file (always empty)
//	objects/<name>      one file per key
//	objects/.tmp-*      a write in progress
//
// <name> is the hexadecimal SHA-256 of the key: 64 bytes whatever the key
// holds, so no key can name a path outside the directory ("..", "/",
// NUL), and none overflows NAME_MAX. Each file also holds its key, and a read
// checks it, so two keys can never silently share a file.
//
// An object file holds, in one file, the key, the data and the version token:
// 16 random bytes drawn when the file is written, shown as 32 hexadecimal
// digits. Random tokens never repeat, not even when a key is deleted and
// written again, so a token never names two contents. A CRC-32C covers the
// whole file, and a file that fails a check returns an error matching
// ErrCorrupt.
//
// A write takes an exclusive flock(2) on the lock file, compares the
// current file's token with the expected one, writes a temporary file in
// objects/, fsyncs it, renames it over the key's file and fsyncs objects/,
// then releases the lock: the compare and the rename happen under one lock
// every process honours, and a write that returned is on disk. One lock for
// the whole store, rather than one per key, keeps the directory free of lock
// files that could never be safely removed; writes to different keys queue
// behind one another, which costs little next to the fsyncs each makes.
// Reads take no lock: a rename replaces a file whole, so a read sees the old
// file or the new one, never a mix.
//
// The lock is advisory: every writer must go through a DirConditionalStore
// (of any process). flock(2) is not reliable on network file systems; use a
// local directory. Files are created with mode 0600 and directories with
// 0700.
//
// MaxObjectSize is the largest data size a Get returns and a PutIfVersion
// accepts; zero (or less) means DefaultMaxObjectSize. It is read without
// locking and must be set before first use.
type DirConditionalStore struct {
	MaxObjectSize int64

	dir     string        // absolute path of the store
	objects string        // dir/objects
	sem     chan struct{} // one writer of this value at a time; holds the flock
}

var (
	_ ConditionalStore = (*DirConditionalStore)(nil)
	_ Deleter          = (*DirConditionalStore)(nil)
)

// The object file format, version 1. Integers are big-endian.
//
//	offset size  field
//	0      4     magic "WFD\x00"
//	4      1     format version (1)
//	5      16    version token
//	21     2     key length K
//	23     8     data length N
//	31     K     key
//	31+K   N     data
//	31+K+N 4     CRC-32C of bytes [0, 31+K+N)
const (
	dirMagic       = "WFD\x00"
	dirVersion     = 1
	dirHeaderSize  = 31
	dirTokenSize   = 16
	dirTempPattern = ".tmp-*"
	dirTempPrefix  = ".tmp-"
)

var dirCastagnoli = crc32.MakeTable(crc32.Castagnoli)

// NewDirConditionalStore opens the store in dir, creating dir and its
// layout when missing. Temporary files that a crashed writer left behind
// are removed when no other writer holds the lock.
func NewDirConditionalStore(dir string) (*DirConditionalStore, error) {
	if dir == "" {
		return nil, invalidArg("dir", "empty")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("writefence: dir store %s: %w", Escape(dir), err)
	}
	s := &DirConditionalStore{dir: abs, objects: filepath.Join(abs, "objects"), sem: make(chan struct{}, 1)}
	_, statErr := os.Stat(abs)
	if err := os.MkdirAll(s.objects, 0o700); err != nil {
		return nil, fmt.Errorf("writefence: dir store %s: %w", Escape(abs), err)
	}
	// Make the new directories durable before any object is written: a
	// write acknowledged later must not vanish with its directory's entry.
	dirs := []string{s.objects, abs}
	if errors.Is(statErr, fs.ErrNotExist) {
		dirs = append(dirs, filepath.Dir(abs))
	}
	for _, d := range dirs {
		if err := syncDir(d); err != nil {
			return nil, fmt.Errorf("writefence: dir store %s: %w", Escape(abs), err)
		}
	}
	lock, err := s.openLock()
	if err != nil {
		return nil, err
	}
	defer lock.Close()
	if err := flockNoWait(lock); err == nil {
		// Holding the lock, no write is in progress: every temporary file
		// is a crashed writer's. When the lock is busy they stay until the
		// next open.
		s.removeTemps()
	} else if !errors.Is(err, syscall.EWOULDBLOCK) {
		return nil, fmt.Errorf("writefence: dir store %s: lock: %w", Escape(abs), err)
	}
	return s, nil
}

// Dir returns the absolute path of the store's directory.
func (s *DirConditionalStore) Dir() string { return s.dir }

func (s *DirConditionalStore) limit() int64 {
	if s.MaxObjectSize > 0 {
		return s.MaxObjectSize
	}
	return DefaultMaxObjectSize
}

// path returns the file of key; see the type's documentation.
func (s *DirConditionalStore) path(key string) string {
	sum := sha256.Sum256([]byte(key))
	return filepath.Join(s.objects, hex.EncodeToString(sum[:]))
}

func checkDirKey(key string) error {
	switch {
	case key == "":
		return invalidArg("key", "empty")
	case len(key) > MaxKeyLen:
		return invalidArg("key", "%d bytes, more than %d", len(key), MaxKeyLen)
	}
	return nil
}

// Get implements ConditionalStore. It reads one file, which holds the data
// and its token together.
func (s *DirConditionalStore) Get(ctx context.Context, key string) ([]byte, string, error) {
	if err := ctx.Err(); err != nil {
		return nil, "", err
	}
	if err := checkDirKey(key); err != nil {
		return nil, "", err
	}
	f, err := os.Open(s.path(key))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, "", fmt.Errorf("writefence: dir get %s: %w", Escape(key), ErrNotFound)
	}
	if err != nil {
		return nil, "", fmt.Errorf("writefence: dir get %s: %w", Escape(key), err)
	}
	defer f.Close()
	data, token, err := s.readObject(f, key, true)
	if err != nil {
		return nil, "", err
	}
	return data, token, nil
}

// readObject decodes the object file r of key. With withData false it
// stops after the key and returns only the token, for the compare of a
// write; otherwise it reads and checks the whole file.
func (s *DirConditionalStore) readObject(r io.Reader, key string, withData bool) ([]byte, string, error) {
	corrupt := func(check string) error {
		return &CorruptError{Key: key, Check: "dir store: " + check}
	}
	readErr := func(err error) error {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return corrupt("truncated file")
		}
		return fmt.Errorf("writefence: dir get %s: %w", Escape(key), err)
	}
	h := make([]byte, dirHeaderSize)
	if _, err := io.ReadFull(r, h); err != nil {
		return nil, "", readErr(err)
	}
	switch {
	case string(h[:4]) != dirMagic:
		return nil, "", corrupt("magic")
	case h[4] != dirVersion:
		return nil, "", corrupt("unknown format version")
	}
	token := hex.EncodeToString(h[5 : 5+dirTokenSize])
	keyLen := int(binary.BigEndian.Uint16(h[21:]))
	dataLen := binary.BigEndian.Uint64(h[23:])
	stored := make([]byte, keyLen)
	if _, err := io.ReadFull(r, stored); err != nil {
		return nil, "", readErr(err)
	}
	if string(stored) != key {
		// Another key's file at this key's name: a SHA-256 collision or
		// a file put there by hand.
		return nil, "", corrupt("file holds another key " + Escape(string(stored)))
	}
	if !withData {
		return nil, token, nil
	}
	if limit := s.limit(); dataLen > uint64(limit) {
		return nil, "", &TooLargeError{Key: key, Limit: limit}
	}
	data := make([]byte, dataLen)
	if _, err := io.ReadFull(r, data); err != nil {
		return nil, "", readErr(err)
	}
	var tail [checksumSize + 1]byte
	n, err := io.ReadFull(r, tail[:])
	switch {
	case n < checksumSize && (err == io.EOF || err == io.ErrUnexpectedEOF):
		return nil, "", corrupt("truncated file")
	case n > checksumSize:
		return nil, "", corrupt("trailing bytes")
	case err != io.ErrUnexpectedEOF:
		return nil, "", readErr(err)
	}
	sum := crc32.Update(crc32.Checksum(h, dirCastagnoli), dirCastagnoli, stored)
	sum = crc32.Update(sum, dirCastagnoli, data)
	if binary.BigEndian.Uint32(tail[:]) != sum {
		return nil, "", corrupt("checksum")
	}
	return data, token, nil
}

// PutIfVersion implements ConditionalStore. The compare and the rename that
// replaces the key's file both happen under the store's exclusive lock,
// which every process writing the directory takes; the file and the
// directory are fsynced before the lock is released. Data larger than the
// store's MaxObjectSize returns an *InvalidArgumentError: it could never be
// read back.
func (s *DirConditionalStore) PutIfVersion(ctx context.Context, key string, data []byte, expectVersion string) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	if err := checkDirKey(key); err != nil {
		return "", err
	}
	if limit := s.limit(); int64(len(data)) > limit {
		return "", invalidArg("data", "%d bytes, more than the store's limit of %d", len(data), limit)
	}
	var token [dirTokenSize]byte
	if _, err := rand.Read(token[:]); err != nil {
		return "", fmt.Errorf("writefence: dir put %s: token: %w", Escape(key), err)
	}
	unlock, err := s.lock(ctx)
	if err != nil {
		return "", err
	}
	defer unlock()

	path := s.path(key)
	current, err := s.currentToken(path, key)
	if err != nil {
		return "", err
	}
	if current != expectVersion {
		return "", fmt.Errorf("writefence: dir put %s: %w", Escape(key), ErrConflict)
	}
	if err := s.replace(path, key, token, data); err != nil {
		return "", fmt.Errorf("writefence: dir put %s: %w", Escape(key), err)
	}
	return hex.EncodeToString(token[:]), nil
}

// currentToken returns the token of the file at path, or "" when there is
// none. The caller holds the lock.
func (s *DirConditionalStore) currentToken(path, key string) (string, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("writefence: dir put %s: %w", Escape(key), err)
	}
	defer f.Close()
	_, token, err := s.readObject(f, key, false)
	return token, err
}

// replace writes the object file for key to a temporary file, makes it
// durable and renames it over path. The caller holds the lock.
func (s *DirConditionalStore) replace(path, key string, token [dirTokenSize]byte, data []byte) (err error) {
	h := make([]byte, dirHeaderSize, dirHeaderSize+len(key))
	copy(h, dirMagic)
	h[4] = dirVersion
	copy(h[5:], token[:])
	binary.BigEndian.PutUint16(h[21:], uint16(len(key)))
	binary.BigEndian.PutUint64(h[23:], uint64(len(data)))
	h = append(h, key...)
	sum := crc32.Update(crc32.Checksum(h, dirCastagnoli), dirCastagnoli, data)
	tail := binary.BigEndian.AppendUint32(nil, sum)

	tmp, err := os.CreateTemp(s.objects, dirTempPattern)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	for _, b := range [][]byte{h, data, tail} {
		if _, err := tmp.Write(b); err != nil {
			return err
		}
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	// The rename is durable only once the directory is; until then a crash
	// could bring the old file back after the caller was told the write
	// landed.
	return syncDir(s.objects)
}

// Delete implements Deleter. It takes the store's lock, so it never
// interleaves with a conditional write.
func (s *DirConditionalStore) Delete(ctx context.Context, key string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := checkDirKey(key); err != nil {
		return err
	}
	unlock, err := s.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	err = os.Remove(s.path(key))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err == nil {
		err = syncDir(s.objects)
	}
	if err != nil {
		return fmt.Errorf("writefence: dir delete %s: %w", Escape(key), err)
	}
	return nil
}

// Bounds of the wait between attempts to take a lock another process holds.
const (
	dirLockPollMin = 50 * time.Microsecond
	dirLockPollMax = 5 * time.Millisecond
)

// lock takes the store's exclusive lock: first this value's semaphore, so
// one goroutine per store value contends for the file lock, then the flock
// on the lock file. Both waits honour ctx; the flock is polled, because a
// blocking flock cannot be cancelled.
func (s *DirConditionalStore) lock(ctx context.Context) (unlock func(), err error) {
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	f, err := s.openLock()
	if err != nil {
		<-s.sem
		return nil, err
	}
	release := func() {
		f.Close() // closing the last descriptor of the open file drops the flock
		<-s.sem
	}
	wait := dirLockPollMin
	for {
		err := flockNoWait(f)
		if err == nil {
			return release, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			release()
			return nil, fmt.Errorf("writefence: dir store %s: lock: %w", Escape(s.dir), err)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			release()
			return nil, ctx.Err()
		case <-t.C:
		}
		wait = min(2*wait, dirLockPollMax)
	}
}

func (s *DirConditionalStore) openLock() (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(s.dir, "lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("writefence: dir store %s: lock: %w", Escape(s.dir), err)
	}
	return f, nil
}

// removeTemps deletes leftover temporary files; the caller holds the lock.
// It is best effort: a file it cannot remove stays until the next open.
func (s *DirConditionalStore) removeTemps() {
	entries, err := os.ReadDir(s.objects)
	if err != nil {
		return
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), dirTempPrefix) {
			os.Remove(filepath.Join(s.objects, e.Name()))
		}
	}
}

// flockNoWait tries once to take an exclusive flock on f.
func flockNoWait(f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err != syscall.EINTR {
			return err
		}
	}
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
