package dynamostore

import (
	"container/list"
	"sync"
)

// cache remembers, per key, the intact item of the version the store last
// wrote or read, so that a write conditioned on that version can compare
// the whole item without reading it first. An entry is never wrong, only
// stale: tokens never repeat, so an item with the remembered version and
// exactly the remembered data and digest is the item remembered, and a
// condition built from a stale entry fails on the server.
type cache struct {
	mu    sync.Mutex // guards the fields
	size  int64      // the bytes of data the entries hold
	order *list.List // of *cacheEntry, the most recently used first
	byKey map[string]*list.Element
}

type cacheEntry struct {
	key string
	it  *item
}

func (s *Store) cacheLimit() int64 {
	if s.CacheBytes == 0 {
		return defaultCacheBytes
	}
	return s.CacheBytes
}

// remember makes it key's entry, evicting the least recently used entries
// beyond the limit. it must not be modified afterwards.
func (s *Store) remember(key string, it *item) {
	limit := s.cacheLimit()
	c := &s.cache
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dropLocked(key)
	if limit <= 0 || int64(len(it.data)) > limit {
		return
	}
	if c.byKey == nil {
		c.order, c.byKey = list.New(), map[string]*list.Element{}
	}
	c.byKey[key] = c.order.PushFront(&cacheEntry{key: key, it: it})
	c.size += int64(len(it.data))
	for c.size > limit {
		c.dropLocked(c.order.Back().Value.(*cacheEntry).key)
	}
}

// recall returns key's remembered item when it is at version.
func (s *Store) recall(key, version string) (*item, bool) {
	c := &s.cache
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.byKey[key]
	if !ok {
		return nil, false
	}
	it := e.Value.(*cacheEntry).it
	if it.version != version {
		return nil, false
	}
	c.order.MoveToFront(e)
	return it, true
}

// forget drops key's entry.
func (s *Store) forget(key string) {
	c := &s.cache
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dropLocked(key)
}

func (c *cache) dropLocked(key string) {
	e, ok := c.byKey[key]
	if !ok {
		return
	}
	c.order.Remove(e)
	delete(c.byKey, key)
	c.size -= int64(len(e.Value.(*cacheEntry).it.data))
}
