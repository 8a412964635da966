//go:build writefence_nosdk

package main

// Built with writefence_nosdk, the command has no store of an SDK: every
// store_<name>_omitted.go is built, and an address of one of those stores
// names this tag.
func init() { omittedBy = "writefence_nosdk" }
