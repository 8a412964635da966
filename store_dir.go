package writefence

import (
	"bufio"
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
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/writefence/writefence/internal/keys"
)

// DirConditionalStore is a ConditionalStore over a directory of the local
// file system, correct across goroutines and across processes of one host
// that open the same directory. It is the persistent store for a single
// machine: tests, demos and deployments whose writers share a disk. It
// needs flock(2), so it works on Linux, macOS, the BSDs and illumos only:
// elsewhere (Windows, Solaris, AIX, Plan 9, WebAssembly) its constructors
// return a *StoreError matching errors.ErrUnsupported.
//
// Layout under the directory:
//
//	lock                the store's lock file (always empty)
//	objects/<name>      one file per key
//	objects/.tmp-*      a write in progress
//	blobs/<name>        one file per blob (BlobStore)
//	blobs/.tmp-*        a blob being written
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
// The lock is the file at the path dir/lock. Each store value keeps the
// lock file open for as long as it lives (one open file per value), and a
// write that has taken the flock checks that the file it locked is still
// the file at the path; if the path is gone or names another file, it lets
// go and takes the file at the path instead, creating it when absent. So
// when the lock file is removed or replaced while a write holds it, every
// store value opened before keeps waiting for that write, then moves to the
// file at the path: no two of them write at once. A store opened after the
// removal, while the write still holds the old file, cannot see that lock:
// do not remove the lock file of a store in use.
//
// Every read checks the whole file, GetPrefix too: the token survives
// damage to the rest of the file, so only the checksum tells whether the
// token still names the bytes. Reads and the compare of a write stream the
// file through a fixed buffer and keep only what they return, and a write
// streams the parts it is given into the file, so a Fence over the store
// never holds more than the one payload it pushes.
//
// Blobs (BlobStore) are files of their own in blobs/, named as objects are
// (the SHA-256 of the key) and holding their key, so that ListBlobs can
// name them; see CreateBlob for the file and how it is written. A blob is
// written once and never replaced, so blob writes take no lock: each is
// streamed into a temporary file, made durable, and linked into place
// create-only, an atomic step of the file system. A CRC-32C covers each
// blob file, as it covers objects: OpenBlob's reader checks it as it
// streams and ends with an error matching ErrCorrupt, instead of io.EOF,
// when the file was damaged. A blob's Modified is its file's modification
// time, when its last byte was written: the local clock, which is the
// store's own.
//
// The lock is advisory: every writer must go through a DirConditionalStore
// (of any process). flock(2) is not reliable on network file systems; use a
// local directory. Files are created with mode 0600 and directories with
// 0700.
//
// Every failure is a *StoreError whose Op is "dir open", "dir get", "dir
// put", "dir delete" or "dir list", or for blobs "dir blob create", "dir
// blob open", "dir blob read", "dir blob stat", "dir blob list" or "dir blob
// delete"; a cancelled context returns ctx.Err() itself. A write, or the
// lock it takes, that the file system refuses (permissions, a file system
// mounted read-only, a store opened read-only) returns one matching
// fs.ErrPermission, and wrote nothing: retrying cannot change it. A failure to make the directory durable after the new file was
// renamed into place matches ErrOutcomeUnknown instead, never
// fs.ErrPermission: that write may have landed.
//
// MaxObjectSize is the largest data size a Get returns and a PutIfVersion
// accepts; zero (or less) means defaultMaxObjectSize. It is read without
// locking and must be set before first use.
type DirConditionalStore struct {
	MaxObjectSize int64

	dir      string        // absolute path of the store
	objects  string        // dir/objects
	blobs    string        // dir/blobs
	sem      chan struct{} // one writer of this value at a time; holds the flock; guards lockFile
	readOnly bool          // opened by OpenDirConditionalStoreReadOnly

	// lockFile is the lock file as this value last opened it, nil when it
	// must be opened again; guarded by sem. It stays open between writes
	// so that a lock file removed while another writer holds it is still
	// the file this value waits on.
	lockFile *os.File
}

var _ ConditionalStore = (*DirConditionalStore)(nil)

var _ Capable = (*DirConditionalStore)(nil)

// Capabilities implements Capable: the store's PrefixReader, PartsPutter
// and BlobStore are its own.
func (s *DirConditionalStore) Capabilities() ConditionalStore { return s }

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
	dirReadBuffer  = 64 << 10 // what a read buffers beyond the bytes it returns
)

// The operations of the store's errors (StoreError.Op).
const (
	dirOpen   = "dir open"
	dirGet    = "dir get"
	dirPut    = "dir put"
	dirDelete = "dir delete"
	dirList   = "dir list"

	dirBlobCreate = "dir blob create"
	dirBlobOpen   = "dir blob open"
	dirBlobRead   = "dir blob read"
	dirBlobStat   = "dir blob stat"
	dirBlobList   = "dir blob list"
	dirBlobDelete = "dir blob delete"
)

// NewDirConditionalStore opens the store in dir, creating dir and its
// layout when missing. Temporary files that a crashed writer left behind
// are removed: those of objects when no other writer holds the lock, those
// of blobs once no writer holds them and they are a minute old. On a system where the
// store cannot lock files it returns a *StoreError matching
// errors.ErrUnsupported.
func NewDirConditionalStore(dir string) (*DirConditionalStore, error) {
	s, err := newDirStore(dir, false)
	if err != nil {
		return nil, err
	}
	_, statErr := os.Stat(s.dir)
	for _, d := range []string{s.objects, s.blobs} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, dirErr(dirOpen, "", err)
		}
	}
	// Make the new directories durable before any object is written: a
	// write acknowledged later must not vanish with its directory's entry.
	dirs := []string{s.objects, s.blobs, s.dir}
	if errors.Is(statErr, fs.ErrNotExist) {
		dirs = append(dirs, filepath.Dir(s.dir))
	}
	for _, d := range dirs {
		if err := syncDir(d); err != nil {
			return nil, dirErr(dirOpen, "", err)
		}
	}
	s.removeBlobTemps()
	s.sem <- struct{}{} // nobody else has the value yet
	defer func() { <-s.sem }()
	locked, err := s.attemptLock(dirOpen, "")
	if err != nil {
		return nil, err
	}
	if locked {
		// Holding the lock, no write is in progress: every temporary file
		// is a crashed writer's. When the lock is busy they stay until the
		// next open.
		s.removeTemps()
		s.unlock()
	}
	return s, nil
}

// OpenDirConditionalStoreReadOnly opens the existing store in dir for
// reading only: it creates nothing, takes no lock and needs no write
// permission, so a user who may only read the directory can read the
// store. Get, GetPrefix, List, OpenBlob, StatBlob and ListBlobs work as
// on a store NewDirConditionalStore opened; PutIfVersion,
// PutPartsIfVersion, Delete, CreateBlob and DeleteBlob return an error
// matching fs.ErrPermission. A dir that holds no store returns an error
// matching fs.ErrNotExist. On a system where the store cannot lock files
// it returns a *StoreError matching errors.ErrUnsupported, as
// NewDirConditionalStore does: no writer could share the store there.
func OpenDirConditionalStoreReadOnly(dir string) (*DirConditionalStore, error) {
	s, err := newDirStore(dir, true)
	if err != nil {
		return nil, err
	}
	st, err := os.Stat(s.objects)
	if err == nil && !st.IsDir() {
		err = fmt.Errorf("%s is not a directory: %w", esc(s.objects), fs.ErrNotExist)
	}
	if err != nil {
		return nil, storeErr(dirOpen, "", nil, fmt.Errorf("%s: no store there: %w", esc(s.dir), err))
	}
	return s, nil
}

// newDirStore returns the store value for dir, checking what both
// constructors need: a system that can lock files and a directory name.
func newDirStore(dir string, readOnly bool) (*DirConditionalStore, error) {
	if !dirLockSupported {
		return nil, storeErr(dirOpen, "", errors.ErrUnsupported, errNoFlock())
	}
	if dir == "" {
		return nil, storeErr(dirOpen, "", nil, invalidArg("dir", "empty"))
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, dirErr(dirOpen, "", fmt.Errorf("%s: %w", esc(dir), err))
	}
	return &DirConditionalStore{
		dir:      abs,
		objects:  filepath.Join(abs, "objects"),
		blobs:    filepath.Join(abs, "blobs"),
		sem:      make(chan struct{}, 1),
		readOnly: readOnly,
	}, nil
}

func (s *DirConditionalStore) limit() int64 {
	if s.MaxObjectSize > 0 {
		return s.MaxObjectSize
	}
	return defaultMaxObjectSize
}

// path returns the file of key; see the type's documentation.
func (s *DirConditionalStore) path(key string) string {
	sum := sha256.Sum256([]byte(key))
	return filepath.Join(s.objects, hex.EncodeToString(sum[:]))
}

// check returns the error of an operation that must not start: a done ctx,
// a key the store cannot hold, or, for a write, a read-only store.
func (s *DirConditionalStore) check(ctx context.Context, op, key string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	switch {
	case key == "":
		return storeErr(op, key, nil, invalidArg("key", "empty"))
	case len(key) > keys.MaxKeyLen:
		return storeErr(op, key, nil, invalidArg("key", "%d bytes, more than %d", len(key), keys.MaxKeyLen))
	case s.readOnly && (op == dirPut || op == dirDelete || op == dirBlobCreate || op == dirBlobDelete):
		return storeErr(op, key, nil, fmt.Errorf("the store %s was opened read-only: %w", esc(s.dir), fs.ErrPermission))
	}
	return nil
}

// Get implements ConditionalStore. It reads one file, which holds the data
// and its token together, and checks it whole. A damaged file returns a
// *CorruptError whose Version is the damaged version of the file (see
// PutIfVersion).
func (s *DirConditionalStore) Get(ctx context.Context, key string) ([]byte, string, error) {
	data, _, token, err := s.get(ctx, key, -1)
	return data, token, err
}

var _ PrefixReader = (*DirConditionalStore)(nil)

// GetPrefix implements PrefixReader: the first n bytes of the data, its
// size and its token, from one file, with the same verdict as Get. The
// whole file is read and checked, as Get checks it, but only n bytes of
// its data are kept, so a damaged file is a *CorruptError here too,
// however few bytes are asked for. As Get, it refuses data larger than the
// read limit having read only the file's header and key.
func (s *DirConditionalStore) GetPrefix(ctx context.Context, key string, n int64) ([]byte, int64, string, error) {
	if n < 1 {
		return nil, 0, "", storeErr(dirGet, key, nil, invalidArg("n", "%d, must be at least 1", n))
	}
	return s.get(ctx, key, n)
}

// get reads key's file, keeping the first keep bytes of its data (all of
// them when keep is negative).
func (s *DirConditionalStore) get(ctx context.Context, key string, keep int64) ([]byte, int64, string, error) {
	if err := s.check(ctx, dirGet, key); err != nil {
		return nil, 0, "", err
	}
	f, err := os.Open(s.path(key))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, 0, "", storeErr(dirGet, key, ErrNotFound, nil)
	}
	if err != nil {
		return nil, 0, "", dirErr(dirGet, key, err)
	}
	defer f.Close()
	return s.readObject(f, dirGet, key, keep)
}

// dirDamagedPrefix starts the version of a damaged file: intact tokens are
// 32 hexadecimal digits, so no damaged version equals an intact token.
const dirDamagedPrefix = "damaged-"

// readObject reads the object file f of key for op and checks all of it:
// the header, the key, the length against the file's size and the
// checksum. It returns the first keep bytes of the data (all of them when
// keep is negative), the data's size and the token; the rest of the data
// is checked as it streams by, never buffered. With keep 0 (the compare of
// a write) it reads an object of any size; otherwise an intact file whose
// data exceeds the limit returns a *StoreError matching ErrTooLarge,
// having read only its header and key.
//
// A file that fails a check is damaged in place: its token, kept inside
// it, may still look intact, so it is never returned. The *CorruptError
// carries instead the damaged version, "damaged-" and the SHA-256 of every
// byte of the file, which names exactly the bytes found and is what a
// write must be conditioned on to replace them, and, when the file's header
// and key still locate its data, the first 4 KiB of that data (Head).
func (s *DirConditionalStore) readObject(f *os.File, op, key string, keep int64) ([]byte, int64, string, error) {
	fail := func(err error) ([]byte, int64, string, error) { return nil, 0, "", dirErr(op, key, err) }
	st, err := f.Stat()
	if err != nil {
		return fail(err)
	}
	r := bufio.NewReaderSize(f, dirReadBuffer)
	crc := crc32.New(castagnoli)
	dataStart := int64(-1) // where the data starts, once the header and key are read
	headRoom := 0          // how much of the data is kept as the head of damaged data
	corrupt := func(check string) ([]byte, int64, string, error) {
		// Only a damaged file is hashed, from its first byte, through the
		// same descriptor: the same file even if a rename replaced the
		// path since. Intact files cost the checksum alone. The same pass
		// keeps the head of the data, when its start is known, so that a
		// record's header can still be read from it.
		sha := sha256.New()
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return fail(err)
		}
		var head *headWriter
		w := io.Writer(sha)
		if dataStart >= 0 {
			head = &headWriter{skip: dataStart, room: headRoom}
			w = io.MultiWriter(sha, head)
		}
		if _, err := io.CopyBuffer(w, f, make([]byte, dirReadBuffer)); err != nil {
			return fail(err)
		}
		ce := &CorruptError{Key: key, Version: dirDamagedPrefix + hex.EncodeToString(sha.Sum(nil)), Check: "dir store: " + check}
		if head != nil {
			ce.Head = head.b
		}
		return fail(ce)
	}
	// readFull fills b and reports false at the end of the file.
	readFull := func(b []byte) (bool, error) {
		_, err := io.ReadFull(r, b)
		switch {
		case err == nil:
			crc.Write(b)
			return true, nil
		case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
			return false, nil
		}
		return false, err
	}

	h := make([]byte, dirHeaderSize)
	if ok, err := readFull(h); err != nil {
		return fail(err)
	} else if !ok {
		return corrupt("truncated file")
	}
	switch {
	case string(h[:4]) != dirMagic:
		return corrupt("magic")
	case h[4] != dirVersion:
		return corrupt("unknown format version")
	}
	token := hex.EncodeToString(h[5 : 5+dirTokenSize])
	keyLen := int64(binary.BigEndian.Uint16(h[21:]))
	dataLen := binary.BigEndian.Uint64(h[23:])
	stored := make([]byte, keyLen)
	if ok, err := readFull(stored); err != nil {
		return fail(err)
	} else if !ok {
		return corrupt("truncated file")
	}
	if string(stored) != key {
		// Another key's file at this key's name: a SHA-256 collision or
		// a file put there by hand.
		return corrupt("file holds another key " + esc(string(stored)))
	}
	dataStart = dirHeaderSize + keyLen
	headRoom = int(min(dataLen, maxHeaderSize)) // not the checksum after short data
	// The size the header declares must be the file's size; comparing
	// first keeps a damaged length from passing for a large object.
	rest := st.Size() - dirHeaderSize - keyLen - checksumSize
	switch {
	case rest < 0 || dataLen > uint64(rest):
		return corrupt("truncated file")
	case dataLen < uint64(rest):
		return corrupt("trailing bytes")
	}
	size := int64(dataLen) // at most the file's size
	if limit := s.limit(); keep != 0 && size > limit {
		// Intact as far as the header tells; reading further would pass
		// the limit.
		return nil, 0, "", tooLarge(op, key, limit)
	}
	if keep < 0 || keep > size {
		keep = size
	}
	data := make([]byte, keep)
	if ok, err := readFull(data); err != nil {
		return fail(err)
	} else if !ok {
		return corrupt("truncated file") // shrank while read
	}
	if n, err := io.CopyN(crc, r, size-keep); err != nil {
		if n < size-keep && errors.Is(err, io.EOF) {
			return corrupt("truncated file") // shrank while read
		}
		return fail(err)
	}
	sum := crc.Sum32()
	var tail [checksumSize + 1]byte
	n, err := io.ReadFull(r, tail[:])
	switch {
	case n < checksumSize && (err == io.EOF || err == io.ErrUnexpectedEOF):
		return corrupt("truncated file")
	case n > checksumSize:
		return corrupt("trailing bytes")
	case err != io.ErrUnexpectedEOF:
		return fail(err)
	}
	if binary.BigEndian.Uint32(tail[:]) != sum {
		return corrupt("checksum")
	}
	return data, size, token, nil
}

// headWriter keeps the room bytes written to it after the first skip.
type headWriter struct {
	skip int64
	room int
	b    []byte
}

func (h *headWriter) Write(p []byte) (int, error) {
	n := len(p)
	if h.skip >= int64(len(p)) {
		h.skip -= int64(len(p))
		return n, nil
	}
	p = p[h.skip:]
	h.skip = 0
	take := min(len(p), h.room-len(h.b))
	h.b = append(h.b, p[:take]...)
	return n, nil
}

// PutIfVersion implements ConditionalStore. The compare and the rename that
// replaces the key's file both happen under the store's exclusive lock,
// which every process writing the directory takes; the file and the
// directory are fsynced before the lock is released. Data larger than the
// store's MaxObjectSize returns an error matching ErrInvalidArgument: it
// could never be read back.
//
// The compare reads and checks the current file whole, because its token
// is inside it and survives damage to the rest. Over a damaged file a write
// conditioned on any version but the damaged version Get reported returns
// that *CorruptError and writes nothing; one conditioned on the damaged
// version replaces the file if it still hashes to it, else ErrConflict.
func (s *DirConditionalStore) PutIfVersion(ctx context.Context, key string, data []byte, expectVersion string) (string, error) {
	return s.PutPartsIfVersion(ctx, key, [][]byte{data}, expectVersion)
}

var _ PartsPutter = (*DirConditionalStore)(nil)

// PutPartsIfVersion implements PartsPutter: PutIfVersion of the parts
// joined, which are written one after the other into the new file and
// never copied.
func (s *DirConditionalStore) PutPartsIfVersion(ctx context.Context, key string, parts [][]byte, expectVersion string) (string, error) {
	if err := s.check(ctx, dirPut, key); err != nil {
		return "", err
	}
	var size int64
	for _, p := range parts {
		size += int64(len(p))
	}
	if limit := s.limit(); size > limit {
		return "", storeErr(dirPut, key, nil, invalidArg("data", "%d bytes, more than the store's limit of %d", size, limit))
	}
	var token [dirTokenSize]byte
	if _, err := rand.Read(token[:]); err != nil {
		return "", storeErr(dirPut, key, nil, fmt.Errorf("token: %w", err))
	}
	unlock, err := s.lock(ctx, dirPut, key)
	if err != nil {
		return "", err
	}
	defer unlock()

	path := s.path(key)
	current, err := s.currentVersion(path, key)
	var corrupt *CorruptError
	switch {
	case errors.As(err, &corrupt):
		if expectVersion != corrupt.Version {
			return "", err
		}
	case err != nil:
		return "", err
	case current != expectVersion:
		return "", storeErr(dirPut, key, ErrConflict, nil)
	}
	if dirTestHooks.replace != nil {
		dirTestHooks.replace(s, key)
	}
	if err := s.replace(path, key, token, parts, size); err != nil {
		return "", err
	}
	return hex.EncodeToString(token[:]), nil
}

// currentVersion returns the token of the intact file at path, "" when
// there is none, or the *CorruptError of a damaged one. The caller holds
// the lock.
func (s *DirConditionalStore) currentVersion(path, key string) (string, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", dirErr(dirPut, key, err)
	}
	defer f.Close()
	_, _, token, err := s.readObject(f, dirPut, key, 0)
	return token, err
}

// replace writes the object file for key, whose data is parts joined (size
// bytes), to a temporary file, makes it durable and renames it over path.
// The caller holds the lock. It returns a *StoreError.
func (s *DirConditionalStore) replace(path, key string, token [dirTokenSize]byte, parts [][]byte, size int64) error {
	if err := s.writeFile(path, key, token, parts, size); err != nil {
		return dirErr(dirPut, key, err)
	}
	// The rename is durable only once the directory is; until then a crash
	// could bring the old file back after the caller was told the write
	// landed. The new file is in place, though: a failure here leaves the
	// write's outcome unknown, and must not pass for a refusal (a
	// permission error matches fs.ErrPermission), so its cause is kept as
	// text only.
	if err := syncDir(s.objects); err != nil {
		return storeErr(dirPut, key, ErrOutcomeUnknown, fmt.Errorf("the file is in place but %s could not be synced: %v", esc(s.objects), err))
	}
	return nil
}

// writeFile writes the object file to a temporary file, makes it durable
// and renames it over path; nothing is at path if it fails.
func (s *DirConditionalStore) writeFile(path, key string, token [dirTokenSize]byte, parts [][]byte, size int64) (err error) {
	h := make([]byte, dirHeaderSize, dirHeaderSize+len(key))
	copy(h, dirMagic)
	h[4] = dirVersion
	copy(h[5:], token[:])
	binary.BigEndian.PutUint16(h[21:], uint16(len(key)))
	binary.BigEndian.PutUint64(h[23:], uint64(size))
	h = append(h, key...)
	sum := crc32.Checksum(h, castagnoli)
	for _, p := range parts {
		sum = crc32.Update(sum, castagnoli, p)
	}
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
	if _, err := tmp.Write(h); err != nil {
		return err
	}
	for _, p := range parts {
		if _, err := tmp.Write(p); err != nil {
			return err
		}
	}
	if _, err := tmp.Write(tail); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

var _ Deleter = (*DirConditionalStore)(nil)

// Delete implements Deleter. It takes the store's lock, so it never
// interleaves with a conditional write.
func (s *DirConditionalStore) Delete(ctx context.Context, key string) error {
	if err := s.check(ctx, dirDelete, key); err != nil {
		return err
	}
	unlock, err := s.lock(ctx, dirDelete, key)
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
		return dirErr(dirDelete, key, err)
	}
	return nil
}

// Bounds of the wait between attempts to take a lock another process holds.
const (
	dirLockPollMin = 50 * time.Microsecond
	dirLockPollMax = 5 * time.Millisecond
)

// lock takes the store's exclusive lock for op on key: first this value's
// semaphore, so one goroutine per store value contends for the file lock,
// then the flock on the lock file. Both waits honour ctx; the flock is
// polled, because a blocking flock cannot be cancelled.
func (s *DirConditionalStore) lock(ctx context.Context, op, key string) (unlock func(), err error) {
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	wait := dirLockPollMin
	for {
		locked, err := s.attemptLock(op, key)
		switch {
		case err != nil:
			<-s.sem
			return nil, err
		case locked:
			return func() {
				s.unlock()
				<-s.sem
			}, nil
		case s.lockFile == nil:
			// The file this value locked was no longer the lock; the
			// file at the path is tried at once.
			if err := ctx.Err(); err != nil {
				<-s.sem
				return nil, err
			}
			continue
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			<-s.sem
			return nil, ctx.Err()
		case <-t.C:
		}
		wait = min(2*wait, dirLockPollMax)
	}
}

// dirTestHooks let the package's tests step into the store's writes. All
// are nil outside tests.
var dirTestHooks struct {
	// tryLock, when set, makes each attempt of a store to take its lock
	// (NewDirConditionalStore's and each write's): it calls attempt, or
	// not, and returns what the store is to see.
	tryLock func(s *DirConditionalStore, attempt func() (bool, error)) (bool, error)

	// replace, when set, runs in a write that holds the lock and whose
	// compare passed, right before the key's file is replaced.
	replace func(s *DirConditionalStore, key string)

	// blobLink, when set, runs in CreateBlob once the blob's temporary
	// file is durable, right before it is linked into place.
	blobLink func(s *DirConditionalStore, key string)
}

// dirLockSupported says whether the store can lock files here. It is
// dirHasFlock, and a variable only so that a test can take it away.
var dirLockSupported = dirHasFlock

// errNoFlock says why the directory store cannot work here.
func errNoFlock() error {
	return fmt.Errorf("the directory store cannot lock files on %s", runtime.GOOS)
}

// attemptLock makes one attempt to take the lock (tryFlock), through the
// test hook when one is set. The caller holds sem.
func (s *DirConditionalStore) attemptLock(op, key string) (bool, error) {
	attempt := func() (bool, error) { return s.tryFlock(op, key) }
	if dirTestHooks.tryLock != nil {
		return dirTestHooks.tryLock(s, attempt)
	}
	return attempt()
}

// tryFlock tries once to take the flock of the lock file, opening it
// first when this value has none open. It reports true only when this
// value holds the flock of the file the lock path names. A locked file
// that the path no longer names (it was removed, or replaced) excludes
// nobody who opens the path now: tryFlock then closes it, dropping its
// flock, and reports false with lockFile nil, so that the next attempt
// takes the file at the path, creating it when absent. The caller holds
// sem.
func (s *DirConditionalStore) tryFlock(op, key string) (bool, error) {
	fail := func(err error) (bool, error) {
		s.closeLock()
		return false, dirErr(op, key, fmt.Errorf("lock %s: %w", esc(s.dir), err))
	}
	path := filepath.Join(s.dir, "lock")
	if s.lockFile == nil {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return fail(err)
		}
		s.lockFile = f
	}
	locked, err := dirTryLock(s.lockFile)
	if err != nil {
		return fail(err)
	}
	if !locked {
		return false, nil
	}
	held, err := s.lockFile.Stat()
	if err != nil {
		return fail(err)
	}
	atPath, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return fail(err)
	case os.SameFile(held, atPath):
		return true, nil
	}
	s.closeLock()
	return false, nil
}

// unlock drops the flock this value holds; the caller holds sem.
func (s *DirConditionalStore) unlock() {
	if dirUnlock(s.lockFile) != nil {
		// Closing the file drops its flock for certain; the next write
		// opens it again.
		s.closeLock()
	}
}

// closeLock closes the lock file, dropping any flock it holds; the caller
// holds sem.
func (s *DirConditionalStore) closeLock() {
	if s.lockFile != nil {
		s.lockFile.Close()
		s.lockFile = nil
	}
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

// dirErr is the *StoreError of op on key for err, an error of the file
// system. A file system mounted read-only refuses a write as finally as a
// permission does, and matches fs.ErrPermission too (EACCES and EPERM
// already do).
func dirErr(op, key string, err error) error {
	if dirReadOnlyFS(err) && !errors.Is(err, fs.ErrPermission) {
		return storeErr(op, key, fs.ErrPermission, err)
	}
	return storeErr(op, key, nil, err)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

var _ Lister = (*DirConditionalStore)(nil)

// List implements Lister. It reads the key held in each object file, so it
// opens every file of the store; keys come in lexical order. A file whose
// key cannot be read back (its header is damaged, or it sits under another
// key's name) cannot be named: the listing goes on, and List then returns
// a *CorruptError for each such file, joined, naming the file and carrying
// its damaged version.
func (s *DirConditionalStore) List(ctx context.Context, prefix string, fn func(key string) error) error {
	entries, err := os.ReadDir(s.objects)
	if err != nil {
		return storeErr(dirList, "", nil, err)
	}
	var keys []string
	var damaged []error
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return err
		}
		name := e.Name()
		if strings.HasPrefix(name, dirTempPrefix) || !e.Type().IsRegular() {
			continue
		}
		key, err := s.fileKey(name)
		switch {
		case err != nil:
			if errors.Is(err, fs.ErrNotExist) {
				continue // deleted since the directory was read
			}
			if !errors.Is(err, ErrCorrupt) {
				return err
			}
			damaged = append(damaged, err)
		case strings.HasPrefix(key, prefix):
			keys = append(keys, key)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := fn(k); err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return errors.Join(damaged...)
}

// fileKey returns the key the object file name holds, checked against the
// name; a file it cannot name returns a *CorruptError with its damaged
// version.
func (s *DirConditionalStore) fileKey(name string) (string, error) {
	path := filepath.Join(s.objects, name)
	f, err := os.Open(path)
	if err != nil {
		return "", storeErr(dirList, "", nil, err)
	}
	defer f.Close()
	h := make([]byte, dirHeaderSize)
	_, err = io.ReadFull(f, h)
	var key []byte
	if err == nil && string(h[:4]) == dirMagic && h[4] == dirVersion {
		key = make([]byte, binary.BigEndian.Uint16(h[21:]))
		_, err = io.ReadFull(f, key)
	}
	if err == nil && key != nil && s.path(string(key)) == path {
		return string(key), nil
	}
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		return "", storeErr(dirList, "", nil, err)
	}
	// Hash the file from its start for the version Get would report.
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return "", storeErr(dirList, "", nil, err)
	}
	sha := sha256.New()
	if _, err := io.Copy(sha, f); err != nil {
		return "", storeErr(dirList, "", nil, err)
	}
	return "", storeErr(dirList, "", nil, &CorruptError{
		Version: dirDamagedPrefix + hex.EncodeToString(sha.Sum(nil)),
		Check:   "dir store: file objects/" + name + " holds no readable key of its name",
	})
}

// The blob file format, version 1. Integers are big-endian.
//
//	offset   size  field
//	0        4     magic "WFB\x00"
//	4        1     format version (1)
//	5        2     key length K
//	7        K     key
//	7+K      N     data
//	7+K+N    8     data length N
//	15+K+N   4     CRC-32C of bytes [0, 15+K+N)
//
// The length follows the data because a blob is streamed: it is known
// only at its end. The file's own size must agree with it.
const (
	dirBlobMagic      = "WFB\x00"
	dirBlobVersion    = 1
	dirBlobHeaderSize = 7
	dirBlobTailSize   = 12
	dirBlobBuffer     = 256 << 10 // what a blob write holds in memory

	// dirBlobTempAge is how old an unlocked temporary blob file must be
	// before a store that opens the directory removes it: older than the
	// moment between its creation and its writer's flock.
	dirBlobTempAge = time.Minute
)

var _ BlobStore = (*DirConditionalStore)(nil)

// blobPath returns the file of the blob key: blobs/ and the hexadecimal
// SHA-256 of the key, as for objects.
func (s *DirConditionalStore) blobPath(key string) string {
	sum := sha256.Sum256([]byte(key))
	return filepath.Join(s.blobs, hex.EncodeToString(sum[:]))
}

// CreateBlob implements BlobStore. It streams r, through a buffer of 256
// KiB, into a temporary file in blobs/ (the file format: the key, the
// data, the data's length and a CRC-32C over all of it), fsyncs it, links
// it into place under the blob's name, which fails if the name exists
// (an error matching ErrConflict, the blob in place unchanged), removes
// the temporary name and fsyncs blobs/. The link is the one step that
// makes the blob appear, whole: no lock is needed. A failure of r or of
// the file system, or a done ctx, leaves no blob at key. A failure to make
// blobs/ durable once the blob is linked matches ErrOutcomeUnknown.
//
// While it writes, the temporary file is flocked, so that a store opened
// meanwhile (which removes temporary blob files that a crashed writer
// left) leaves it alone.
func (s *DirConditionalStore) CreateBlob(ctx context.Context, key string, r io.Reader) (BlobInfo, error) {
	if err := s.check(ctx, dirBlobCreate, key); err != nil {
		return BlobInfo{}, err
	}
	tmp, err := os.CreateTemp(s.blobs, dirTempPattern)
	if err != nil {
		return BlobInfo{}, dirErr(dirBlobCreate, key, err)
	}
	linked := false
	defer func() {
		if !linked {
			os.Remove(tmp.Name())
		}
		tmp.Close() // drops the flock, once the temporary name is gone
	}()
	if _, err := dirTryLock(tmp); err != nil {
		return BlobInfo{}, dirErr(dirBlobCreate, key, err)
	}
	h := make([]byte, dirBlobHeaderSize, dirBlobHeaderSize+len(key))
	copy(h, dirBlobMagic)
	h[4] = dirBlobVersion
	binary.BigEndian.PutUint16(h[5:], uint16(len(key)))
	h = append(h, key...)
	crc := crc32.New(castagnoli)
	crc.Write(h)
	if _, err := tmp.Write(h); err != nil {
		return BlobInfo{}, dirErr(dirBlobCreate, key, err)
	}
	var size int64
	buf := make([]byte, dirBlobBuffer)
	for {
		if err := ctx.Err(); err != nil {
			return BlobInfo{}, err
		}
		n, rerr := r.Read(buf)
		if n > 0 {
			crc.Write(buf[:n])
			if _, err := tmp.Write(buf[:n]); err != nil {
				return BlobInfo{}, dirErr(dirBlobCreate, key, err)
			}
			size += int64(n)
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			if ctxErr := ctx.Err(); ctxErr != nil {
				return BlobInfo{}, ctxErr
			}
			return BlobInfo{}, storeErr(dirBlobCreate, key, nil, rerr)
		}
	}
	tail := binary.BigEndian.AppendUint64(nil, uint64(size))
	crc.Write(tail)
	tail = binary.BigEndian.AppendUint32(tail, crc.Sum32())
	if _, err := tmp.Write(tail); err != nil {
		return BlobInfo{}, dirErr(dirBlobCreate, key, err)
	}
	if err := tmp.Sync(); err != nil {
		return BlobInfo{}, dirErr(dirBlobCreate, key, err)
	}
	st, err := tmp.Stat()
	if err != nil {
		return BlobInfo{}, dirErr(dirBlobCreate, key, err)
	}
	if dirTestHooks.blobLink != nil {
		dirTestHooks.blobLink(s, key)
	}
	if err := ctx.Err(); err != nil {
		return BlobInfo{}, err
	}
	switch err := os.Link(tmp.Name(), s.blobPath(key)); {
	case errors.Is(err, fs.ErrExist):
		return BlobInfo{}, storeErr(dirBlobCreate, key, ErrConflict, err)
	case err != nil:
		return BlobInfo{}, dirErr(dirBlobCreate, key, err)
	}
	linked = true
	// The blob is in place: from here on a failure leaves it there, and
	// must not pass for a refusal (see replace).
	os.Remove(tmp.Name())
	if err := syncDir(s.blobs); err != nil {
		return BlobInfo{}, storeErr(dirBlobCreate, key, ErrOutcomeUnknown, fmt.Errorf("the blob is in place but %s could not be synced: %v", esc(s.blobs), err))
	}
	return BlobInfo{Key: key, Size: size, Modified: st.ModTime()}, nil
}

// openBlob opens the blob file of key for op and checks what can be
// checked without reading its data: the header, the key, and the length
// the file ends with against the file's size. It returns the file, the
// blob's info, and the CRC-32C of the header and key.
func (s *DirConditionalStore) openBlob(ctx context.Context, op, key string) (*os.File, BlobInfo, uint32, error) {
	if err := s.check(ctx, op, key); err != nil {
		return nil, BlobInfo{}, 0, err
	}
	f, err := os.Open(s.blobPath(key))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, BlobInfo{}, 0, storeErr(op, key, ErrNotFound, nil)
	}
	if err != nil {
		return nil, BlobInfo{}, 0, dirErr(op, key, err)
	}
	info, sum, err := s.checkBlobFile(f, op, key)
	if err != nil {
		f.Close()
		return nil, BlobInfo{}, 0, err
	}
	return f, info, sum, nil
}

// checkBlobFile checks the blob file f of key (see openBlob).
func (s *DirConditionalStore) checkBlobFile(f *os.File, op, key string) (BlobInfo, uint32, error) {
	corrupt := func(check string) (BlobInfo, uint32, error) {
		return BlobInfo{}, 0, dirErr(op, key, &CorruptError{Key: key, Check: "dir store: blob " + check})
	}
	st, err := f.Stat()
	if err != nil {
		return BlobInfo{}, 0, dirErr(op, key, err)
	}
	h := make([]byte, dirBlobHeaderSize+len(key))
	switch _, err := f.ReadAt(h, 0); {
	case errors.Is(err, io.EOF):
		return corrupt("truncated file")
	case err != nil:
		return BlobInfo{}, 0, dirErr(op, key, err)
	case string(h[:4]) != dirBlobMagic:
		return corrupt("magic")
	case h[4] != dirBlobVersion:
		return corrupt("unknown format version")
	case int(binary.BigEndian.Uint16(h[5:])) != len(key) || string(h[dirBlobHeaderSize:]) != key:
		return corrupt("file holds another key")
	}
	size := st.Size() - int64(len(h)) - dirBlobTailSize
	if size < 0 {
		return corrupt("truncated file")
	}
	var n [8]byte
	if _, err := f.ReadAt(n[:], int64(len(h))+size); err != nil {
		return BlobInfo{}, 0, dirErr(op, key, err)
	}
	if binary.BigEndian.Uint64(n[:]) != uint64(size) {
		return corrupt("length disagrees with the file's size")
	}
	return BlobInfo{Key: key, Size: size, Modified: st.ModTime()}, crc32.Checksum(h, castagnoli), nil
}

// OpenBlob implements BlobStore. The blob's header, key and length are
// checked when it is opened, a damaged one returning a *StoreError that
// wraps a *CorruptError; the reader checks the CRC-32C once the data is
// read, and ends with such an error instead of io.EOF if the file was
// damaged, so the bytes read are good only once io.EOF is reached. The
// reader reads the file it opened, even if the blob is deleted meanwhile.
func (s *DirConditionalStore) OpenBlob(ctx context.Context, key string) (io.ReadCloser, BlobInfo, error) {
	f, info, sum, err := s.openBlob(ctx, dirBlobOpen, key)
	if err != nil {
		return nil, BlobInfo{}, err
	}
	start := int64(dirBlobHeaderSize + len(key))
	return &dirBlobReader{
		f:    f,
		key:  key,
		data: io.NewSectionReader(f, start, info.Size),
		tail: start + info.Size,
		size: info.Size,
		sum:  sum,
	}, info, nil
}

// dirBlobReader reads a blob file's data and checks its CRC-32C at the
// end.
type dirBlobReader struct {
	f    *os.File
	key  string
	data *io.SectionReader
	tail int64  // the offset of the length that follows the data
	size int64  // the data's length
	read int64  // the data read so far
	sum  uint32 // the CRC-32C of what was read so far, header included
	err  error  // the verdict, once reached
}

func (b *dirBlobReader) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	n, err := b.data.Read(p)
	b.sum = crc32.Update(b.sum, castagnoli, p[:n])
	b.read += int64(n)
	switch {
	case err == nil:
		return n, nil
	case err != io.EOF:
		return n, dirErr(dirBlobRead, b.key, err)
	case b.read < b.size:
		// The file shrank since it was opened.
		b.err = dirErr(dirBlobRead, b.key, &CorruptError{Key: b.key, Check: "dir store: blob truncated file"})
	default:
		b.err = b.verdict()
	}
	return n, b.err
}

// verdict reads what follows the data and returns io.EOF if the CRC-32C
// it holds is the file's, else the error of a damaged file.
func (b *dirBlobReader) verdict() error {
	var tail [dirBlobTailSize]byte
	switch _, err := b.f.ReadAt(tail[:], b.tail); {
	case errors.Is(err, io.EOF):
		return dirErr(dirBlobRead, b.key, &CorruptError{Key: b.key, Check: "dir store: blob truncated file"})
	case err != nil:
		return dirErr(dirBlobRead, b.key, err)
	}
	if crc32.Update(b.sum, castagnoli, tail[:8]) != binary.BigEndian.Uint32(tail[8:]) {
		return dirErr(dirBlobRead, b.key, &CorruptError{Key: b.key, Check: "dir store: blob checksum"})
	}
	return io.EOF
}

func (b *dirBlobReader) Close() error { return b.f.Close() }

// StatBlob implements BlobStore: the blob's size and modification time,
// with the checks OpenBlob makes before reading (the data itself is not
// read).
func (s *DirConditionalStore) StatBlob(ctx context.Context, key string) (BlobInfo, error) {
	f, info, _, err := s.openBlob(ctx, dirBlobStat, key)
	if err != nil {
		return BlobInfo{}, err
	}
	f.Close()
	return info, nil
}

// ListBlobs implements BlobStore. It reads the key held in each blob file,
// so it opens every blob file of the store, and calls fn in the order of
// the files' names; it reads no data, so a blob whose data or length is
// damaged is listed (with the size its file's length implies), to be
// found damaged by OpenBlob or StatBlob, or deleted. A file whose key
// cannot be read back, or that holds another key than its name's, cannot
// be named: the listing goes on, and ListBlobs then returns a
// *CorruptError for each such file, joined, as List does.
func (s *DirConditionalStore) ListBlobs(ctx context.Context, prefix string, fn func(BlobInfo) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	entries, err := os.ReadDir(s.blobs)
	if errors.Is(err, fs.ErrNotExist) && s.readOnly {
		return nil // a store written before it held blobs
	}
	if err != nil {
		return dirErr(dirBlobList, prefix, err)
	}
	var damaged []error
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return err
		}
		name := e.Name()
		if strings.HasPrefix(name, dirTempPrefix) || !e.Type().IsRegular() {
			continue
		}
		info, err := s.blobFileInfo(name)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue // deleted since the directory was read
		case errors.Is(err, ErrCorrupt):
			damaged = append(damaged, err)
			continue
		case err != nil:
			return err
		case !strings.HasPrefix(info.Key, prefix):
			continue
		}
		if err := fn(info); err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return errors.Join(damaged...)
}

// blobFileInfo returns the info of the blob file name: its key, read
// from the file and checked against the name, the size of the data the
// file's length implies, and its modification time. A file whose key
// cannot be read, or that sits under another name than its key's, returns
// a *CorruptError naming the file.
func (s *DirConditionalStore) blobFileInfo(name string) (BlobInfo, error) {
	path := filepath.Join(s.blobs, name)
	f, err := os.Open(path)
	if err != nil {
		return BlobInfo{}, storeErr(dirBlobList, "", nil, err)
	}
	defer f.Close()
	h := make([]byte, dirBlobHeaderSize)
	_, err = io.ReadFull(f, h)
	var key []byte
	if err == nil && string(h[:4]) == dirBlobMagic && h[4] == dirBlobVersion {
		key = make([]byte, binary.BigEndian.Uint16(h[5:]))
		_, err = io.ReadFull(f, key)
	}
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		return BlobInfo{}, storeErr(dirBlobList, "", nil, err)
	}
	if err != nil || key == nil || s.blobPath(string(key)) != path {
		return BlobInfo{}, storeErr(dirBlobList, "", nil, &CorruptError{Check: "dir store: file blobs/" + name + " holds no readable key of its name"})
	}
	st, err := f.Stat()
	if err != nil {
		return BlobInfo{}, dirErr(dirBlobList, string(key), err)
	}
	size := max(0, st.Size()-int64(dirBlobHeaderSize+len(key))-dirBlobTailSize)
	return BlobInfo{Key: string(key), Size: size, Modified: st.ModTime()}, nil
}

// DeleteBlob implements BlobStore: it removes the blob's file and fsyncs
// blobs/. A reader that has the blob open goes on reading it.
func (s *DirConditionalStore) DeleteBlob(ctx context.Context, key string) error {
	if err := s.check(ctx, dirBlobDelete, key); err != nil {
		return err
	}
	err := os.Remove(s.blobPath(key))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err == nil {
		err = syncDir(s.blobs)
	}
	if err != nil {
		return dirErr(dirBlobDelete, key, err)
	}
	return nil
}

// removeBlobTemps deletes the temporary blob files that crashed writers
// left: those no writer holds the flock of, older than dirBlobTempAge.
// It is best effort: a file it cannot remove stays until the next open.
func (s *DirConditionalStore) removeBlobTemps() {
	entries, err := os.ReadDir(s.blobs)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), dirTempPrefix) {
			continue
		}
		path := filepath.Join(s.blobs, e.Name())
		f, err := os.Open(path)
		if err != nil {
			continue
		}
		st, err := f.Stat()
		if err == nil && time.Since(st.ModTime()) > dirBlobTempAge {
			if locked, err := dirTryLock(f); err == nil && locked {
				os.Remove(path)
			}
		}
		f.Close()
	}
}
