//go:build writefence_novalkey

package main

// Built with writefence_novalkey, the command has no Valkey store (store_valkey.go).
func init() {
	omit("writefence_novalkey", "valkey", "valkeys", "redis", "rediss", "valkey+cluster", "valkeys+cluster")
}
