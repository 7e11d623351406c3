package api

import (
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/owedhq/owed/internal/ledger"
)

// A list cursor is opaque to clients: base64url (no padding) of
// "v1.<due_at in Unix microseconds>.<id>", the position of the last row of
// the page it follows (ledger.Position). The version lets a later release
// change the form and still tell an old cursor apart.
const cursorVersion = "v1"

// maxCursorLen bounds a cursor before it is decoded: v1 with two int64s is
// under 60 characters.
const maxCursorLen = 64

// errBadCursor is every cursor refusal; the field and the message are the
// API's (query.go).
var errBadCursor = errors.New("not a cursor this API returned")

// encodeCursor makes the next_cursor of a page ending at p.
func encodeCursor(p ledger.Position) string {
	raw := cursorVersion + "." + strconv.FormatInt(p.DueAt.UnixMicro(), 10) + "." + strconv.FormatInt(p.ID, 10)
	return base64.RawURLEncoding.EncodeToString([]byte(raw))
}

// decodeCursor reads a cursor encodeCursor made. It accepts exactly that
// form, so decode then encode gives back the same text.
func decodeCursor(s string) (ledger.Position, error) {
	if s == "" || len(s) > maxCursorLen {
		return ledger.Position{}, errBadCursor
	}
	raw, err := base64.RawURLEncoding.Strict().DecodeString(s)
	if err != nil {
		return ledger.Position{}, errBadCursor
	}
	parts := strings.Split(string(raw), ".")
	if len(parts) != 3 || parts[0] != cursorVersion {
		return ledger.Position{}, errBadCursor
	}
	due, err1 := strconv.ParseInt(parts[1], 10, 64)
	id, err2 := strconv.ParseInt(parts[2], 10, 64)
	if err1 != nil || err2 != nil || id < 1 {
		return ledger.Position{}, errBadCursor
	}
	p := ledger.Position{DueAt: time.UnixMicro(due).UTC(), ID: id}
	if !ledger.InRange(p.DueAt) {
		// No row holds such a time, so no page ended there; the database
		// would refuse to compare with it (a 500, not the caller's 400).
		return ledger.Position{}, errBadCursor
	}
	if encodeCursor(p) != s {
		// A leading zero or a "+": accepted by ParseInt, never made here.
		return ledger.Position{}, errBadCursor
	}
	return p, nil
}
