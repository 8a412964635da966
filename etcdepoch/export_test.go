package etcdepoch

// SetLeading makes e believe it leads with key at rev, as a won campaign
// would, so a test can show that etcd's guard, not this belief, decides.
func (e *Election) SetLeading(key string, rev int64) { e.lead.Set(key, rev, nil) }

// Leading returns the leader key and create revision e believes it holds.
func (e *Election) Leading() (string, int64) {
	key, rev, _ := e.lead.Get()
	return key, rev
}
