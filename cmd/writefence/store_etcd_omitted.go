//go:build writefence_noetcd

package main

// Built with writefence_noetcd, the command has no etcd store (store_etcd.go).
func init() { omit("writefence_noetcd", "etcd", "etcds") }
