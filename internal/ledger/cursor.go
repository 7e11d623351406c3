package ledger

import (
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
	"time"
)

// A list cursor (GET /v1/notifications, the console's list) is opaque to clients: base64url (no padding) of
// "v1.<due_at in Unix microseconds>.<id>", the position of the last row of
// the page it follows (Position). The version lets a later release
// change the form and still tell an old cursor apart.
const cursorVersion = "v1"

// maxCursorLen bounds a cursor before it is decoded: v1 with two int64s is
// under 60 characters.
const maxCursorLen = 64

// ErrBadCursor is every cursor refusal.
var ErrBadCursor = errors.New("not a cursor this API returned")

// Cursor is the position as a list cursor: the API's next_cursor of a page
// ending at p, the console's link to the next page.
func (p Position) Cursor() string {
	raw := cursorVersion + "." + strconv.FormatInt(p.DueAt.UnixMicro(), 10) + "." + strconv.FormatInt(p.ID, 10)
	return base64.RawURLEncoding.EncodeToString([]byte(raw))
}

// ParseCursor reads a cursor Cursor made. It accepts exactly that form, so
// parse then Cursor gives back the same text.
func ParseCursor(s string) (Position, error) {
	if s == "" || len(s) > maxCursorLen {
		return Position{}, ErrBadCursor
	}
	raw, err := base64.RawURLEncoding.Strict().DecodeString(s)
	if err != nil {
		return Position{}, ErrBadCursor
	}
	parts := strings.Split(string(raw), ".")
	if len(parts) != 3 || parts[0] != cursorVersion {
		return Position{}, ErrBadCursor
	}
	due, err1 := strconv.ParseInt(parts[1], 10, 64)
	id, err2 := strconv.ParseInt(parts[2], 10, 64)
	if err1 != nil || err2 != nil || id < 1 {
		return Position{}, ErrBadCursor
	}
	p := Position{DueAt: time.UnixMicro(due).UTC(), ID: id}
	if !InRange(p.DueAt) {
		// No row holds such a time, so no page ended there; the database
		// would refuse to compare with it (a 500, not the caller's 400).
		return Position{}, ErrBadCursor
	}
	if p.Cursor() != s {
		// A leading zero or a "+": accepted by ParseInt, never made here.
		return Position{}, ErrBadCursor
	}
	return p, nil
}
