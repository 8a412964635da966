package writefencetest_test

import (
	"bytes"
	"context"
	"errors"
	"sync"

	"github.com/writefence/writefence"
)

// brandFault is how a brandedStore's PutIfBranded departs from the
// contract.
type brandFault int

const (
	brandChecked       brandFault = iota // correct: the brand read in every write's step
	brandIgnored                         // PutIfVersion, whatever the brand holds
	brandOnce                            // the brand read until it matched once, then remembered
	brandClientCompare                   // the brand read in the step, the version compared on the client
)

// brandedStore is a MemStore with PutIfBranded, correct or with one fault.
// Its writes are serialised, so a brand check and the write after it are
// one step, except with brandClientCompare, whose compare and write are
// two.
type brandedStore struct {
	limited
	fault brandFault
	gap   compareGap

	mu      sync.Mutex      // serialises writes and deletes; guards matched
	matched map[string]bool // brand keys found holding the identity once
}

func (s *brandedStore) PutIfVersion(ctx context.Context, key string, data []byte, expect string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.MemStore.PutIfVersion(ctx, key, data, expect)
}

func (s *brandedStore) Delete(ctx context.Context, key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.MemStore.Delete(ctx, key)
}

func (s *brandedStore) Capabilities() writefence.ConditionalStore { return s }

// checkBrand refuses unless brandKey holds identity. The caller holds mu.
func (s *brandedStore) checkBrand(ctx context.Context, brandKey, identity string) error {
	found, _, err := s.MemStore.Get(ctx, brandKey)
	switch {
	case errors.Is(err, writefence.ErrNotFound):
		return &writefence.WireError{Key: brandKey, Expected: identity, Absent: true}
	case err != nil:
		return err
	case string(found) != identity:
		return &writefence.WireError{Key: brandKey, Expected: identity, Found: string(found)}
	}
	return nil
}

func (s *brandedStore) PutIfBranded(ctx context.Context, brandKey, identity, key string, parts [][]byte, expect string) (string, error) {
	data := bytes.Join(parts, nil)
	if s.fault == brandClientCompare {
		return s.putComparing(ctx, brandKey, identity, key, data, expect)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fault == brandChecked || s.fault == brandOnce && !s.matched[brandKey] {
		if err := s.checkBrand(ctx, brandKey, identity); err != nil {
			return "", err
		}
		if s.matched == nil {
			s.matched = map[string]bool{}
		}
		s.matched[brandKey] = true
	}
	return s.MemStore.PutIfVersion(ctx, key, data, expect)
}

// putComparing checks the brand, then compares the version on the client
// and writes unconditionally.
func (s *brandedStore) putComparing(ctx context.Context, brandKey, identity, key string, data []byte, expect string) (string, error) {
	s.mu.Lock()
	err := s.checkBrand(ctx, brandKey, identity)
	s.mu.Unlock()
	if err != nil {
		return "", err
	}
	return compareThenWrite(ctx, &s.MemStore, &s.gap, "branded put", key, data, expect)
}
