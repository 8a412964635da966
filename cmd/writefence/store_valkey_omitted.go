//go:build writefence_novalkey || writefence_nosdk

package main

// Built with writefence_novalkey, the command has no Valkey store (store_valkey.go).
func init() {
	for _, s := range []string{"valkey", "valkeys", "redis", "rediss", "valkey+cluster", "valkeys+cluster"} {
		omitted[s] = "writefence_novalkey"
	}
}
