//go:build writefence_nominio || writefence_nosdk

package main

// Built with writefence_nominio, the command has no S3 store (store_s3.go).
func init() { omitted["s3"] = "writefence_nominio" }
