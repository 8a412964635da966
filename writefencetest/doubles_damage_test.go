package writefencetest_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strconv"
	"sync"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/writefencetest"
)

// sealedFault is how a sealedStore handles damage in place.
type sealedFault int

const (
	sealedCorrect         sealedFault = iota
	sealedUnchecked                   // no check: the damaged bytes under their intact version
	sealedWriteUnchecked              // Get checks, PutIfVersion compares the version alone
	sealedPrefixUnchecked             // Get checks, GetPrefix does not
	sealedOnce                        // a damaged version is accepted once only, ever
	sealedConstant                    // every damage has the same version
	sealedHeadless                    // its *CorruptError never carries the damaged bytes' head
)

// sealedStore keeps each object's version and checksum beside its bytes,
// as a file or a Valkey value does, so damage in place leaves the version
// as it was; a correct one notices the damage by its checksum (see the
// damage clause of writefence.ConditionalStore). Writes are serialised.
type sealedStore struct {
	fault sealedFault

	mu      sync.Mutex // guards the fields below
	objects map[string]*sealedObject
	counter int
	settled map[string]bool // damaged versions written over, for sealedOnce
}

type sealedObject struct {
	data    []byte
	version string
	sum     [sha256.Size]byte // of data as written
}

func (s *sealedStore) Capabilities() writefence.ConditionalStore { return s }

// damage is the suite's Options.Damage: the bytes change in place, the
// version and checksum stay.
func (s *sealedStore) damage(_ context.Context, key string, f writefencetest.Fault) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.objects[key]
	switch {
	case !ok:
		return notFound("sealed damage", key)
	case f.Empty:
		o.data = []byte{}
	case len(o.data) > 0:
		n := len(o.data)
		o.data[(f.Flip%n+n)%n] ^= 1
	}
	return nil
}

// check returns the *CorruptError of o's bytes when they fail their
// checksum, nil when they pass or the fault does not look. The caller
// holds mu.
func (s *sealedStore) check(key string, o *sealedObject, prefix bool) *writefence.CorruptError {
	if s.fault == sealedUnchecked || prefix && s.fault == sealedPrefixUnchecked || sha256.Sum256(o.data) == o.sum {
		return nil
	}
	sum := sha256.Sum256(o.data)
	v := "damaged-" + hex.EncodeToString(sum[:8])
	if s.fault == sealedConstant {
		v = "damaged"
	}
	ce := &writefence.CorruptError{Key: key, Version: v, Check: "sealed store: checksum", Head: slices.Clone(o.data[:min(len(o.data), 4096)])}
	if s.fault == sealedHeadless {
		ce.Head = nil
	}
	return ce
}

// read returns key's object, checked.
func (s *sealedStore) read(ctx context.Context, key string, prefix bool) (*sealedObject, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	o, ok := s.objects[key]
	if !ok {
		return nil, notFound("sealed get", key)
	}
	if ce := s.check(key, o, prefix); ce != nil {
		return nil, &writefence.StoreError{Op: "sealed get", Key: key, Err: ce}
	}
	return o, nil
}

func (s *sealedStore) Get(ctx context.Context, key string) ([]byte, string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, err := s.read(ctx, key, false)
	if err != nil {
		return nil, "", err
	}
	return slices.Clone(o.data), o.version, nil
}

func (s *sealedStore) GetPrefix(ctx context.Context, key string, n int64) ([]byte, int64, string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, err := s.read(ctx, key, true)
	if err != nil {
		return nil, 0, "", err
	}
	return slices.Clone(o.data[:min(n, int64(len(o.data)))]), int64(len(o.data)), o.version, nil
}

func (s *sealedStore) PutIfVersion(ctx context.Context, key string, data []byte, expect string) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.objects[key]
	switch {
	case !ok && expect != "":
		return "", conflict("sealed put", key)
	case !ok:
	case s.fault == sealedWriteUnchecked || s.check(key, o, false) == nil:
		if o.version != expect {
			return "", conflict("sealed put", key)
		}
	default:
		ce := s.check(key, o, false)
		if expect != ce.Version || s.fault == sealedOnce && s.settled[ce.Version] {
			return "", &writefence.StoreError{Op: "sealed put", Key: key, Err: ce}
		}
		if s.settled == nil {
			s.settled = map[string]bool{}
		}
		s.settled[ce.Version] = true
	}
	if s.objects == nil {
		s.objects = map[string]*sealedObject{}
	}
	s.counter++
	v := strconv.Itoa(s.counter)
	s.objects[key] = &sealedObject{data: bytes.Clone(data), version: v, sum: sha256.Sum256(data)}
	return v, nil
}

func (s *sealedStore) Delete(ctx context.Context, key string) error {
	return deleteLocked(ctx, &s.mu, s.objects, key)
}
