package etcdstore

import pb "go.etcd.io/etcd/api/v3/etcdserverpb"

// NewFromKV returns a store over prefix that calls kv instead of a
// client's connection.
func NewFromKV(kv pb.KVClient, prefix string) *Store { return &Store{prefix: prefix, kv: kv} }
