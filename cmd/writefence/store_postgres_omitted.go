//go:build writefence_nopostgres || writefence_nosdk

package main

// Built with writefence_nopostgres, the command has no PostgreSQL store (store_postgres.go).
func init() {
	for _, s := range []string{"postgres", "postgresql"} {
		omitted[s] = "writefence_nopostgres"
	}
}
