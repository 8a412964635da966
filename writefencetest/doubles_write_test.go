package writefencetest_test

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/writefence/writefence"
)

// The doubles of the write path: conditional writes that are not, tokens
// that come back, errors without their detail.

// conflict is a double's refused precondition on key.
func conflict(op, key string) error {
	return &writefence.StoreError{Op: op, Key: key, Err: writefence.ErrConflict}
}

// notFound is a double's missing key.
func notFound(op, key string) error {
	return &writefence.StoreError{Op: op, Key: key, Err: writefence.ErrNotFound}
}

// overwrite writes data at key whatever version it holds, using only the
// conditional write of m: it retries with the current version until one
// lands.
func overwrite(ctx context.Context, m *writefence.MemStore, key string, data []byte) (string, error) {
	for {
		_, current, err := m.Get(ctx, key)
		if err != nil && !errors.Is(err, writefence.ErrNotFound) {
			return "", err
		}
		v, err := m.PutIfVersion(ctx, key, data, current)
		if !errors.Is(err, writefence.ErrConflict) {
			return v, err
		}
	}
}

// gapWindow bounds how long a compareGap holds a caller that has compared.
// Racers released together reach their compares within microseconds of
// each other, so the next one arrives long before; a lone writer just
// waits it out.
const gapWindow = 20 * time.Millisecond

// compareGap stands for the round trip between a client's compare and its
// write, which a real client-side compare has and an in-memory one lacks:
// a caller whose compare passed waits there until another caller has
// compared too (or gapWindow passes). Of racers that all read one version
// and are released together, the first two therefore both pass their
// compares before either writes, in every round.
type compareGap struct {
	mu   sync.Mutex    // guards next
	next chan struct{} // closed by the next compare; nil when nobody waits
}

// compared is called right after each compare, passed or not.
func (g *compareGap) compared(passed bool) {
	g.mu.Lock()
	if g.next != nil {
		close(g.next)
		g.next = nil
	}
	var wait chan struct{}
	if passed {
		wait = make(chan struct{})
		g.next = wait
	}
	g.mu.Unlock()
	if wait == nil {
		return
	}
	t := time.NewTimer(gapWindow)
	defer t.Stop()
	select {
	case <-wait:
	case <-t.C:
		g.mu.Lock()
		if g.next == wait {
			g.next = nil
		}
		g.mu.Unlock()
	}
}

// clientCompareStore is the implementation the contract forbids: it reads,
// compares the version on the client, then writes unconditionally. It is
// correct whenever only one caller writes at a time.
type clientCompareStore struct {
	writefence.MemStore
	gap compareGap
}

func (s *clientCompareStore) PutIfVersion(ctx context.Context, key string, data []byte, expect string) (string, error) {
	return compareThenWrite(ctx, &s.MemStore, &s.gap, "compare put", key, data, expect)
}

// compareThenWrite is a write that compares the version at key with
// expect in one step, refused as op on a mismatch, and overwrites it in
// another, with gap between them.
func compareThenWrite(ctx context.Context, m *writefence.MemStore, gap *compareGap, op, key string, data []byte, expect string) (string, error) {
	_, current, err := m.Get(ctx, key)
	if err != nil && !errors.Is(err, writefence.ErrNotFound) {
		return "", err
	}
	gap.compared(current == expect)
	if current != expect {
		return "", conflict(op, key)
	}
	return overwrite(ctx, m, key, data)
}

// ignoringStore ignores preconditions entirely, as some S3-compatible
// services do with If-Match and If-None-Match.
type ignoringStore struct{ writefence.MemStore }

func (s *ignoringStore) PutIfVersion(ctx context.Context, key string, data []byte, _ string) (string, error) {
	return overwrite(ctx, &s.MemStore, key, data)
}

// partsStore is MemStore with PutPartsIfVersion: correct, or, with ignore
// set, writing the parts whatever the precondition while its PutIfVersion
// stays correct.
type partsStore struct {
	limited
	ignore bool
}

func (s *partsStore) Capabilities() writefence.ConditionalStore { return s }

func (s *partsStore) PutPartsIfVersion(ctx context.Context, key string, parts [][]byte, expect string) (string, error) {
	data := bytes.Join(parts, nil)
	if s.ignore {
		return overwrite(ctx, &s.MemStore, key, data)
	}
	return s.MemStore.PutIfVersion(ctx, key, data, expect)
}

// counterStore numbers each key's versions from 1, and forgets the count
// when the key is deleted: its conditional write is atomic, but a token
// comes back for other bytes once a key is deleted and created again.
type counterStore struct {
	mu      sync.Mutex // guards objects
	objects objects
}

// objects holds a store's objects by key, each with its version number.
type objects map[string]counted

type counted struct {
	data    []byte
	version int
}

// get returns a copy of key's bytes and its version.
func (m objects) get(key string) ([]byte, string, error) {
	o, ok := m[key]
	if !ok {
		return nil, "", notFound("counter get", key)
	}
	return slices.Clone(o.data), strconv.Itoa(o.version), nil
}

// current returns key's object, and whether expect is its version ("" for
// a key that does not exist).
func (m objects) current(key, expect string) (counted, bool) {
	o, ok := m[key]
	return o, ok == (expect != "") && (!ok || strconv.Itoa(o.version) == expect)
}

func (s *counterStore) Get(ctx context.Context, key string) ([]byte, string, error) {
	if err := ctx.Err(); err != nil {
		return nil, "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.objects.get(key)
}

func (s *counterStore) PutIfVersion(ctx context.Context, key string, data []byte, expect string) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.objects.current(key, expect)
	if !ok {
		return "", conflict("counter put", key)
	}
	if s.objects == nil {
		s.objects = objects{}
	}
	o = counted{data: slices.Clone(data), version: o.version + 1}
	s.objects[key] = o
	return strconv.Itoa(o.version), nil
}

func (s *counterStore) Delete(ctx context.Context, key string) error {
	return deleteLocked(ctx, &s.mu, s.objects, key)
}

// deleteLocked is the Delete of a double that keeps its objects in a map
// that mu guards: ctx's error, or the key deleted.
func deleteLocked[V any](ctx context.Context, mu *sync.Mutex, objects map[string]V, key string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	mu.Lock()
	defer mu.Unlock()
	delete(objects, key)
	return nil
}

// errorsFault is how an errorsStore's errors lose their detail.
type errorsFault int

const (
	errorsBare    errorsFault = iota // the bare sentinel, not a *StoreError
	errorsKeyless                    // a *StoreError without the key
)

// errorsStore is MemStore whose errors, otherwise right, lose detail.
type errorsStore struct {
	writefence.MemStore
	fault errorsFault
}

func (s *errorsStore) strip(err error) error {
	var se *writefence.StoreError
	if !errors.As(err, &se) {
		return err
	}
	if s.fault == errorsBare {
		return se.Err
	}
	return &writefence.StoreError{Op: se.Op, Err: se.Err}
}

func (s *errorsStore) Get(ctx context.Context, key string) ([]byte, string, error) {
	data, v, err := s.MemStore.Get(ctx, key)
	return data, v, s.strip(err)
}

func (s *errorsStore) PutIfVersion(ctx context.Context, key string, data []byte, expect string) (string, error) {
	v, err := s.MemStore.PutIfVersion(ctx, key, data, expect)
	return v, s.strip(err)
}

// tokensFault is how a tokensStore takes a version of a form it never
// issues.
type tokensFault int

const (
	tokensLenient tokensFault = iota // quotes and spaces trimmed, as an HTTP header would be
	tokensInvalid                    // refused as an invalid argument, not a conflict
	tokensBare                       // refused as the bare sentinel ErrConflict, not a *StoreError
)

// tokensStore is MemStore, whose tokens are decimal, except for versions of
// another form.
type tokensStore struct {
	writefence.MemStore
	fault tokensFault
}

func (s *tokensStore) PutIfVersion(ctx context.Context, key string, data []byte, expect string) (string, error) {
	switch {
	case s.fault == tokensLenient:
		expect = strings.Trim(expect, `" `)
	case expect != "":
		if n, err := strconv.ParseUint(expect, 10, 64); err != nil || n == 0 || strconv.FormatUint(n, 10) != expect {
			if s.fault == tokensBare {
				return "", writefence.ErrConflict
			}
			return "", &writefence.InvalidArgumentError{Arg: "expectVersion", Reason: "not a version of this store"}
		}
	}
	return s.MemStore.PutIfVersion(ctx, key, data, expect)
}

// deleteStrictStore is MemStore whose Delete of a key that does not exist
// fails with ErrNotFound, which the contract of writefence.Deleter rules
// out: two tools deleting one key at once would see one fail.
type deleteStrictStore struct{ writefence.MemStore }

func (s *deleteStrictStore) Delete(ctx context.Context, key string) error {
	if _, _, err := s.MemStore.Get(ctx, key); err != nil {
		return err
	}
	return s.MemStore.Delete(ctx, key)
}
