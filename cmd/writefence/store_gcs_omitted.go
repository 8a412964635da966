//go:build writefence_nogcs || writefence_nosdk

package main

// Built with writefence_nogcs, the command has no Cloud Storage store (store_gcs.go).
func init() { omitted["gs"] = "writefence_nogcs" }
