//go:build writefence_noetcd || writefence_nosdk

package main

// Built with writefence_noetcd, the command has no etcd store (store_etcd.go).
func init() {
	for _, s := range []string{"etcd", "etcds"} {
		omitted[s] = "writefence_noetcd"
	}
}
