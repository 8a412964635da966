//go:build (!writefence_nominio || !writefence_nogcs || !writefence_novalkey || !writefence_nodynamodb || !writefence_noetcd || !writefence_noazblob || !writefence_nopostgres) && !writefence_nosdk

package main

import (
	"crypto/tls"
	"errors"
	"net/http"
)

// The advice on HTTP and TLS errors is built only with a store reached over
// the network: a build with mem:// and file:// alone compiles neither
// net/http nor crypto/tls.
func init() {
	advisers = append(advisers, adviseNet)
}

// adviseNet says what to do about TLS against a plain endpoint, or a
// certificate this host does not trust.
func adviseNet(err error, inv *invocation) error {
	where := inv.where()
	var plainReply tls.RecordHeaderError
	var badCert *tls.CertificateVerificationError
	switch {
	case errors.Is(err, http.ErrSchemeMismatch):
		return &advisedError{err, "the endpoint of " + where + " speaks plain HTTP: add secure=false to an s3:// address, or use http:// in a gs:// endpoint, and quote the address"}
	case errors.As(err, &plainReply) && valkeyTLS(inv.addr):
		return &advisedError{err, where + " asks for TLS but the server answered in plain text: it does not speak TLS on that port; use valkey:// without tls=true, or turn TLS on at the server"}
	case errors.As(err, &badCert):
		return &advisedError{err, "the server's TLS certificate was not accepted: it is checked against this host's CAs and must name the address's host; set SSL_CERT_FILE to a file holding the server's CA"}
	}
	return nil
}
