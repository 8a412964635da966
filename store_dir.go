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

	"github.com/writefence/writefence/internal/hook"
	"github.com/writefence/writefence/internal/keys"
	"github.com/writefence/writefence/internal/listing"
	"github.com/writefence/writefence/internal/record"
)

// dirStore is a ConditionalStore over a directory of the local
// file system, correct across goroutines and across processes of one host
// that open the same directory. It is the persistent store for a single
// machine: tests, demos and deployments whose writers share a disk. It
// needs flock(2), so it works on Linux, macOS, the BSDs and illumos only:
// elsewhere (Windows, Solaris, AIX, Plan 9, WebAssembly) its constructors
// return a *StoreError matching errors.ErrUnsupported.
//
// Layout under the directory:
//
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
// A write takes an exclusive flock(2) on the objects directory itself,
// compares the current file's token with the expected one, writes a
// temporary file in objects/, fsyncs it, renames it over the key's file and
// fsyncs objects/, then releases the lock: the compare and the rename happen
// under one lock every process honours, and a write that returned is on
// disk. One lock for the whole store, rather than one per key, and no lock
// file: nothing in the directory can be removed or replaced to break the
// exclusion. Writes to different keys queue behind one another, which costs
// little next to the fsyncs each makes. Reads take no lock: a rename
// replaces a file whole, so a read sees the old file or the new one, never a
// mix.
//
// Each store value opens objects/ once, when it is opened, and works
// relative to that directory from then on (an os.Root and one descriptor of
// the directory, kept for as long as the value lives): its reads, its lock and
// its writes all reach the directory it locked, even if the path is later
// renamed or replaced. Values that share a directory exclude each other
// whatever is done to the paths; a value opened on a replacement directory
// is a store of its own.
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
// The lock is advisory: every writer must go through a dirStore
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
// fs.ErrPermission, and wrote nothing: retrying cannot change it. A failure
// to make the directory durable after the new file was renamed into place
// matches ErrOutcomeUnknown instead, never fs.ErrPermission: that write may
// have landed.
//
// MaxObjectSize is the largest data size a Get returns and a PutIfVersion
// accepts; zero (or less) means 64 MiB + 4 KiB, the largest default
// payload and a record header. It is read without
// locking and must be set before first use.
type dirStore struct {
	MaxObjectSize int64

	dir      string        // absolute path of the store
	objects  string        // dir/objects
	blobs    string        // dir/blobs
	sem      chan struct{} // one writer of this value at a time; holds the flock
	readOnly bool          // opened with StoreOptions.ReadOnly

	// root is objects/ as this value opened it: every object file the
	// value reads or writes is reached through it. lockDir is the same
	// directory, open for its flock and its fsyncs.
	root    *os.Root
	lockDir *os.File

	// blobRoot and blobDir are blobs/ as this value opened it, the same
	// way; nil in a read-only store that has none.
	blobRoot *os.Root
	blobDir  *os.File
}

var _ ConditionalStore = (*dirStore)(nil)

var _ Capable = (*dirStore)(nil)

// Capabilities implements Capable: the store's PrefixReader, PartsPutter
// and BlobStore are its own.
func (s *dirStore) Capabilities() ConditionalStore { return s }

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
	dirMagic      = "WFD\x00"
	dirVersion    = 1
	dirHeaderSize = 31
	dirTokenSize  = 16
	dirTempPrefix = ".tmp-"
	dirReadBuffer = 64 << 10 // what a read buffers beyond the bytes it returns
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

// NewDirConditionalStore opens the store in dir, creating it when missing
// (with opts.ReadOnly, opening an existing one for reading), and removes
// the temporary files a crashed writer left. It serves the processes of one
// host: a write takes an exclusive flock(2) on the directory, compares the
// version, writes and fsyncs a temporary file, renames it into place and
// fsyncs the directory, so use a local file system, not a network one.
// Every read checks the file's CRC-32C (ErrCorrupt); every failure is a
// *StoreError whose Op starts with "dir " (errors.ErrUnsupported where
// files cannot be locked).
func NewDirConditionalStore(dir string, opts *StoreOptions) (ConditionalStore, error) {
	var o StoreOptions
	if opts != nil {
		o = *opts
	}
	var s *dirStore
	var err error
	if o.ReadOnly {
		s, err = openDirStoreReadOnly(dir)
	} else {
		s, err = openDirStore(dir)
	}
	if err != nil {
		return nil, err
	}
	s.MaxObjectSize = o.MaxObjectSize
	return s, nil
}

// openDirStore opens the store in dir for writing; see
// NewDirConditionalStore.
func openDirStore(dir string) (*dirStore, error) {
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
	if err := s.openRoot(); err != nil {
		return nil, err
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

// openDirStoreReadOnly opens the existing store in dir for reading only:
// it creates nothing, takes no lock and needs no write permission, so a
// user who may only read the directory can read the store. Writes return
// an error matching fs.ErrPermission; a dir that holds no store, one
// matching fs.ErrNotExist.
func openDirStoreReadOnly(dir string) (*dirStore, error) {
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
	if err := s.openRoot(); err != nil {
		return nil, err
	}
	return s, nil
}

// openRoot opens objects/ for the value's life, as root and as lockDir,
// and blobs/ as blobRoot and blobDir; a read-only store written before it
// held blobs has no blobs/, and then no blobRoot.
func (s *dirStore) openRoot() error {
	root, d, err := openDirRoot(s.objects)
	if err != nil {
		return dirErr(dirOpen, "", err)
	}
	broot, bd, err := openDirRoot(s.blobs)
	if err != nil && !(s.readOnly && errors.Is(err, fs.ErrNotExist)) {
		root.Close()
		d.Close()
		return dirErr(dirOpen, "", err)
	}
	s.root, s.lockDir, s.blobRoot, s.blobDir = root, d, broot, bd
	return nil
}

// openDirRoot opens dir as a root, and the same directory as a file.
func openDirRoot(dir string) (*os.Root, *os.File, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, nil, err
	}
	d, err := root.Open(".")
	if err != nil {
		root.Close()
		return nil, nil, err
	}
	return root, d, nil
}

// newDirStore returns the store value for dir, checking what both
// constructors need: a system that can lock files and a directory name.
func newDirStore(dir string, readOnly bool) (*dirStore, error) {
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
	return &dirStore{
		dir:      abs,
		objects:  filepath.Join(abs, "objects"),
		blobs:    filepath.Join(abs, "blobs"),
		sem:      make(chan struct{}, 1),
		readOnly: readOnly,
	}, nil
}

func (s *dirStore) limit() int64 {
	if s.MaxObjectSize > 0 {
		return s.MaxObjectSize
	}
	return defaultMaxObjectSize
}

// path returns the name of key's file in objects/; see the type's
// documentation.
func (s *dirStore) path(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// check returns the error of an operation that must not start: a done ctx,
// a key the store cannot hold, or, for a write, a read-only store.
func (s *dirStore) check(ctx context.Context, op, key string) error {
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
func (s *dirStore) Get(ctx context.Context, key string) ([]byte, string, error) {
	data, _, token, err := s.get(ctx, key, -1)
	return data, token, err
}

var _ PrefixReader = (*dirStore)(nil)

// GetPrefix implements PrefixReader: the first n bytes of the data, its
// size and its token, from one file, with the same verdict as Get. The
// whole file is read and checked, as Get checks it, but only n bytes of
// its data are kept, so a damaged file is a *CorruptError here too,
// however few bytes are asked for. As Get, it refuses data larger than the
// read limit having read only the file's header and key.
func (s *dirStore) GetPrefix(ctx context.Context, key string, n int64) ([]byte, int64, string, error) {
	if n < 1 {
		return nil, 0, "", storeErr(dirGet, key, nil, invalidArg("n", "%d, must be at least 1", n))
	}
	return s.get(ctx, key, n)
}

// get reads key's file, keeping the first keep bytes of its data (all of
// them when keep is negative).
func (s *dirStore) get(ctx context.Context, key string, keep int64) ([]byte, int64, string, error) {
	if err := s.check(ctx, dirGet, key); err != nil {
		return nil, 0, "", err
	}
	f, err := s.root.Open(s.path(key))
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
// write must be conditioned on to replace them, and the data up to the
// read limit (Head), taken where an intact file of this key has its data: after
// the file header and the key, and before the checksum the file's size
// leaves room for, whatever its damaged header fields claim.
func (s *dirStore) readObject(f *os.File, op, key string, keep int64) ([]byte, int64, string, error) {
	fail := func(err error) ([]byte, int64, string, error) { return nil, 0, "", dirErr(op, key, err) }
	st, err := f.Stat()
	if err != nil {
		return fail(err)
	}
	r := bufio.NewReaderSize(f, dirReadBuffer)
	crc := crc32.New(record.Castagnoli)
	// Where the data of an intact file starts is known from the key alone,
	// and how much of it there is from the file's size: the head of damaged
	// data is taken there, whatever the damaged bytes of the file's own
	// header claim, so damage to the layout cannot hide an intact record
	// header.
	dataStart := int64(dirHeaderSize + len(key))
	headRoom := int(min(max(st.Size()-dataStart-record.ChecksumSize, 0), max(s.limit(), record.MaxHeaderSize)))
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
		if headRoom > 0 {
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
	// The size the header declares must be the file's size; comparing
	// first keeps a damaged length from passing for a large object.
	rest := st.Size() - dirHeaderSize - keyLen - record.ChecksumSize
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
	var tail [record.ChecksumSize + 1]byte
	n, err := io.ReadFull(r, tail[:])
	switch {
	case n < record.ChecksumSize && (err == io.EOF || err == io.ErrUnexpectedEOF):
		return corrupt("truncated file")
	case n > record.ChecksumSize:
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
func (s *dirStore) PutIfVersion(ctx context.Context, key string, data []byte, expectVersion string) (string, error) {
	return s.PutPartsIfVersion(ctx, key, [][]byte{data}, expectVersion)
}

var _ PartsPutter = (*dirStore)(nil)

// PutPartsIfVersion implements PartsPutter: PutIfVersion of the parts
// joined, which are written one after the other into the new file and
// never copied.
func (s *dirStore) PutPartsIfVersion(ctx context.Context, key string, parts [][]byte, expectVersion string) (string, error) {
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
func (s *dirStore) currentVersion(path, key string) (string, error) {
	f, err := s.root.Open(path)
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
func (s *dirStore) replace(path, key string, token [dirTokenSize]byte, parts [][]byte, size int64) error {
	if err := s.writeFile(path, key, token, parts, size); err != nil {
		return dirErr(dirPut, key, err)
	}
	// The rename is durable only once the directory is; until then a crash
	// could bring the old file back after the caller was told the write
	// landed. The new file is in place, though: a failure here leaves the
	// write's outcome unknown, and must not pass for a refusal (a
	// permission error matches fs.ErrPermission), so its cause is kept as
	// text only.
	if err := s.lockDir.Sync(); err != nil {
		return storeErr(dirPut, key, ErrOutcomeUnknown, fmt.Errorf("the file is in place but %s could not be synced: %v", esc(s.objects), err))
	}
	return nil
}

// writeFile writes the object file to a temporary file, makes it durable
// and renames it over path; nothing is at path if it fails.
func (s *dirStore) writeFile(path, key string, token [dirTokenSize]byte, parts [][]byte, size int64) (err error) {
	h := make([]byte, dirHeaderSize, dirHeaderSize+len(key))
	copy(h, dirMagic)
	h[4] = dirVersion
	copy(h[5:], token[:])
	binary.BigEndian.PutUint16(h[21:], uint16(len(key)))
	binary.BigEndian.PutUint64(h[23:], uint64(size))
	h = append(h, key...)
	sum := crc32.Checksum(h, record.Castagnoli)
	for _, p := range parts {
		sum = crc32.Update(sum, record.Castagnoli, p)
	}
	tail := binary.BigEndian.AppendUint32(nil, sum)

	var r [8]byte
	if _, err := rand.Read(r[:]); err != nil {
		return err
	}
	name := dirTempPrefix + hex.EncodeToString(r[:])
	tmp, err := s.root.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			s.root.Remove(name)
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
	return s.root.Rename(name, path)
}

var _ Deleter = (*dirStore)(nil)

// Delete implements Deleter. It takes the store's lock, so it never
// interleaves with a conditional write.
func (s *dirStore) Delete(ctx context.Context, key string) error {
	if err := s.check(ctx, dirDelete, key); err != nil {
		return err
	}
	unlock, err := s.lock(ctx, dirDelete, key)
	if err != nil {
		return err
	}
	defer unlock()
	if err := removeFile(s.root, s.lockDir, s.path(key)); err != nil {
		return dirErr(dirDelete, key, err)
	}
	return nil
}

// removeFile removes the file name of root and fsyncs dir, the same
// directory, so that the removal is durable; a missing file is no error.
func removeFile(root *os.Root, dir *os.File, name string) error {
	err := root.Remove(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	return dir.Sync()
}

// Bounds of the wait between attempts to take a lock another process holds.
const (
	dirLockPollMin = 50 * time.Microsecond
	dirLockPollMax = 5 * time.Millisecond
)

// lock takes the store's exclusive lock for op on key: first this value's
// semaphore, so one goroutine per store value contends for the file lock,
// then the flock on objects/. Both waits honour ctx; the flock is
// polled, because a blocking flock cannot be cancelled.
func (s *dirStore) lock(ctx context.Context, op, key string) (unlock func(), err error) {
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
		}
		if err := hook.Sleep(ctx, wait); err != nil {
			<-s.sem
			return nil, err
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
	tryLock func(s *dirStore, attempt func() (bool, error)) (bool, error)

	// replace, when set, runs in a write that holds the lock and whose
	// compare passed, right before the key's file is replaced.
	replace func(s *dirStore, key string)

	// blobLink, when set, runs in CreateBlob once the blob's temporary
	// file is durable, right before it is linked into place.
	blobLink func(s *dirStore, key string)
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
func (s *dirStore) attemptLock(op, key string) (bool, error) {
	attempt := func() (bool, error) { return s.tryFlock(op, key) }
	if dirTestHooks.tryLock != nil {
		return dirTestHooks.tryLock(s, attempt)
	}
	return attempt()
}

// tryFlock tries once to take the flock of objects/. The caller holds sem.
func (s *dirStore) tryFlock(op, key string) (bool, error) {
	locked, err := dirTryLock(s.lockDir)
	if err != nil {
		return false, dirErr(op, key, fmt.Errorf("lock %s: %w", esc(s.objects), err))
	}
	return locked, nil
}

// unlock drops the flock this value holds; the caller holds sem. Should
// the kernel refuse (it does not for a descriptor it gave), the flock
// would stay with this value, which then waits on itself: a stuck store,
// never two writers.
func (s *dirStore) unlock() {
	dirUnlock(s.lockDir)
}

// removeTemps deletes leftover temporary files; the caller holds the lock.
// It is best effort: a file it cannot remove stays until the next open.
func (s *dirStore) removeTemps() {
	entries, err := s.readDir()
	if err != nil {
		return
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), dirTempPrefix) {
			s.root.Remove(e.Name())
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

// readDir lists objects/, sorted by name.
func (s *dirStore) readDir() ([]fs.DirEntry, error) { return readRoot(s.root) }

// readRoot lists the directory of root, sorted by name.
func readRoot(root *os.Root) ([]fs.DirEntry, error) {
	d, err := root.Open(".")
	if err != nil {
		return nil, err
	}
	defer d.Close()
	entries, err := d.ReadDir(-1)
	slices.SortFunc(entries, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return entries, err
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

var _ Lister = (*dirStore)(nil)

// List implements Lister. It reads the key held in each object file, so it
// opens every file of the store; keys come in lexical order. A file whose
// key cannot be read back (its header is damaged, or it sits under another
// key's name) cannot be named: the listing goes on, and List then returns
// a *CorruptError for each such file, joined, naming the file and carrying
// its damaged version.
func (s *dirStore) List(ctx context.Context, prefix string, fn func(key string) error) error {
	entries, err := s.readDir()
	if err != nil {
		return storeErr(dirList, "", nil, err)
	}
	var keys []string
	damaged, err := scanFiles(ctx, entries, s.fileKey, func(key string) error {
		if strings.HasPrefix(key, prefix) {
			keys = append(keys, key)
		}
		return nil
	})
	if err != nil {
		return err
	}
	slices.Sort(keys)
	if err := listing.Each(ctx, keys, fn); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return errors.Join(damaged...)
}

// scanFiles reads each file of a listing's entries with read, in the
// entries' order, and hands visit what it read, passing over temporary
// files and all but regular ones. A file deleted since the directory was
// read is passed over; one read finds damaged (ErrCorrupt) is too, and
// its error is returned in damaged, for the listing to report once it has
// listed the rest. Any other error of read or visit, or a done ctx, ends
// the scan and is returned as err.
func scanFiles[T any](ctx context.Context, entries []fs.DirEntry, read func(name string) (T, error), visit func(T) error) (damaged []error, err error) {
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		name := e.Name()
		if strings.HasPrefix(name, dirTempPrefix) || !e.Type().IsRegular() {
			continue
		}
		v, err := read(name)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue // deleted since the directory was read
		case errors.Is(err, ErrCorrupt):
			damaged = append(damaged, err)
			continue
		case err != nil:
			return nil, err
		}
		if err := visit(v); err != nil {
			return nil, err
		}
	}
	return damaged, nil
}

// fileKey returns the key the object file name holds, checked against the
// name; a file it cannot name returns a *CorruptError with its damaged
// version.
func (s *dirStore) fileKey(name string) (string, error) {
	path := name
	f, err := s.root.Open(path)
	if err != nil {
		return "", storeErr(dirList, "", nil, err)
	}
	defer f.Close()
	key, err := readFileKey(f, dirHeaderSize, dirMagic, dirVersion, 21)
	if err != nil {
		return "", storeErr(dirList, "", nil, err)
	}
	if key != nil && s.path(string(key)) == path {
		return string(key), nil
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

// readFileKey reads the header of a store file, size bytes, and the key
// that follows it when the header starts with magic and version: a key
// whose length is the big-endian uint16 at lenAt of the header. The key is
// nil when the file is too short to hold them or is of another format;
// the error is any other failure to read.
func readFileKey(f io.Reader, size int, magic string, version byte, lenAt int) ([]byte, error) {
	h := make([]byte, size)
	_, err := io.ReadFull(f, h)
	var key []byte
	if err == nil && string(h[:4]) == magic && h[4] == version {
		key = make([]byte, binary.BigEndian.Uint16(h[lenAt:]))
		_, err = io.ReadFull(f, key)
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return nil, nil
	}
	return key, err
}

// dirBlobTempAge is how old an unlocked temporary blob file must be
// before a store that opens the directory removes it: older than the
// moment between its creation and its writer's flock.
const dirBlobTempAge = time.Minute

// removeBlobTemps deletes the temporary blob files that crashed writers
// left: those no writer holds the flock of, older than dirBlobTempAge.
// It is best effort: a file it cannot remove stays until the next open.
func (s *dirStore) removeBlobTemps() {
	entries, err := readRoot(s.blobRoot)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), dirTempPrefix) {
			continue
		}
		f, err := s.blobRoot.Open(e.Name())
		if err != nil {
			continue
		}
		st, err := f.Stat()
		if err == nil && time.Since(st.ModTime()) > dirBlobTempAge {
			if locked, err := dirTryLock(f); err == nil && locked {
				s.blobRoot.Remove(e.Name())
			}
		}
		f.Close()
	}
}
