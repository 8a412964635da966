//go:build writefence_noazblob || writefence_nosdk

package main

// Built with writefence_noazblob, the command has no Azure Blob store (store_azblob.go).
func init() { omitted["azblob"] = "writefence_noazblob" }
