package service

import (
	"crypto/rand"
	"encoding/hex"
	"net/http"
)

// HeaderRequestID carries a request's id: taken from the caller when it sent
// a sane one (a proxy's or the client's own, so its logs and ours join), else
// made here. Every API response carries it and every log line of the request
// names it as request_id.
const HeaderRequestID = "X-Request-Id"

// MaxRequestID bounds an incoming id: longer ones are replaced, so a caller
// cannot make every log line of its request arbitrarily large.
const MaxRequestID = 128

// RequestID returns r's sane incoming id, or a new random one: the API
// names every request with it, and LimitBody the ones it refuses before
// the API sees them.
func RequestID(r *http.Request) string {
	if id := r.Header.Get(HeaderRequestID); saneRequestID(id) {
		return id
	}
	var b [16]byte
	rand.Read(b[:]) // never fails (crypto/rand panics rather than return an error)
	return hex.EncodeToString(b[:])
}

// saneRequestID accepts 1..MaxRequestID visible ASCII bytes: nothing a log
// viewer or a header could misread (no spaces, control bytes or UTF-8).
func saneRequestID(id string) bool {
	if id == "" || len(id) > MaxRequestID {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] < 0x21 || id[i] > 0x7e {
			return false
		}
	}
	return true
}
