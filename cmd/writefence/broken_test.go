package main

import (
	"context"
	"net/url"
	"strconv"
	"sync"

	"github.com/writefence/writefence"
)

// Broken stores, reachable by address in the tests, to prove that probe
// and race fail on a store that does not fence.
func init() {
	openers["ignoring"] = func(context.Context, *url.URL) (*opened, error) {
		return &opened{store: &ignoringStore{}, close: noClose}, nil
	}
	openers["blind"] = func(context.Context, *url.URL) (*opened, error) {
		return &opened{store: &blindStore{}, close: noClose}, nil
	}
	openers["garbling"] = func(context.Context, *url.URL) (*opened, error) {
		return &opened{store: &garblingStore{}, close: noClose}, nil
	}
}

// garblingStore enforces preconditions but reads back other bytes than
// were written: a server, proxy or cache that damages what it returns.
type garblingStore struct{ writefence.MemStore }

func (s *garblingStore) Get(ctx context.Context, key string) ([]byte, string, error) {
	d, v, err := s.MemStore.Get(ctx, key)
	if len(d) > 0 {
		d[0] ^= 1
	}
	return d, v, err
}

// ignoringStore reads correctly but writes every PutIfVersion, whatever
// the expected version: a server that accepts precondition headers and
// ignores them.
type ignoringStore struct {
	mu      sync.Mutex // guards the fields below
	objects map[string][]byte
	version map[string]string
	counter int
}

func (s *ignoringStore) Get(_ context.Context, key string) ([]byte, string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d, ok := s.objects[key]
	if !ok {
		return nil, "", writefence.ErrNotFound
	}
	return append([]byte(nil), d...), s.version[key], nil
}

func (s *ignoringStore) PutIfVersion(_ context.Context, key string, data []byte, _ string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.objects == nil {
		s.objects, s.version = map[string][]byte{}, map[string]string{}
	}
	s.counter++
	s.objects[key] = append([]byte(nil), data...)
	s.version[key] = strconv.Itoa(s.counter)
	return s.version[key], nil
}

// blindStore accepts every write and never finds anything: every writer
// of a race sees an empty shard and lands, whatever the scheduling.
type blindStore struct{}

func (blindStore) Get(context.Context, string) ([]byte, string, error) {
	return nil, "", writefence.ErrNotFound
}

func (blindStore) PutIfVersion(context.Context, string, []byte, string) (string, error) {
	return "1", nil
}
