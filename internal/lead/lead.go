// Package lead keeps what a candidate of a leader election knows of its
// own leadership, for the elections of etcdepoch and zkepoch: the key it
// leads with (an etcd key, a znode), what that key belongs to (its create
// revision, the session that owns it), and why its last leadership ended.
package lead

import (
	"context"
	"sync"
)

// State is a candidate's leadership. The zero value leads nothing; a State
// is safe for concurrent use.
type State struct {
	mu   sync.Mutex // guards the fields below
	key  string     // the candidate's key after a won campaign, else ""
	id   int64      // what key belongs to
	lost error      // why the last leadership ended, nil before the first
}

// Get returns the key the candidate leads with ("" for none), what it
// belongs to, and why the last leadership ended.
func (s *State) Get() (key string, id int64, lost error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.key, s.id, s.lost
}

// Set records the leadership of key, which belongs to id ("" and 0: none),
// and lost, why the last one ended.
func (s *State) Set(key string, id int64, lost error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.key, s.id, s.lost = key, id, lost
}

// Drop forgets the leadership of key at id for the reason lost, which it
// returns, unless a campaign has replaced it meanwhile. Later epochs are
// refused with lost without asking the server.
func (s *State) Drop(key string, id int64, lost error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.key == key && s.id == id {
		s.key, s.id, s.lost = "", 0, lost
	}
	return lost
}

// Held returns the leadership an epoch is to be minted under, or the error
// that refuses the epoch without asking the server: why the last
// leadership ended, or, before any, notLeader("no campaign won"); or
// ctx.Err() when ctx has ended.
func (s *State) Held(ctx context.Context, notLeader func(reason string) error) (key string, id int64, err error) {
	key, id, lost := s.Get()
	if key == "" {
		if lost != nil {
			return "", 0, lost
		}
		return "", 0, notLeader("no campaign won")
	}
	if err := ctx.Err(); err != nil {
		return "", 0, err
	}
	return key, id, nil
}
