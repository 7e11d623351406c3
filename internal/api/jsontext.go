package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// checkText refuses a JSON body holding a string that is not text: invalid
// UTF-8, or a \u escape of a lone UTF-16 surrogate (\ud800 with no low half
// after it, or a low half alone). encoding/json decodes both silently as
// U+FFFD, so without this check the API would store a different string
// than the client sent and answer 200. The error names the field holding
// the string (notifications[0].payload.text), or the body when the string
// is an object key at the top.
//
// Bodies are checked whole in one pass over the bytes; only a body that
// fails it is walked token by token to find the field.
func checkText(body []byte) *apiError {
	if utf8.Valid(body) && !mayHoldSurrogate(body) {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	var path []frame
	prev := int64(0)
	for {
		tok, err := dec.Token()
		if err != nil {
			// A syntax error or the end: decodeJSON reports the former.
			return nil
		}
		end := dec.InputOffset()
		raw := body[prev:end]
		prev = end
		switch tok := tok.(type) {
		case json.Delim:
			switch tok {
			case '{', '[':
				path = append(path, frame{array: tok == '['})
			default:
				path = path[:len(path)-1]
				advance(path)
			}
			continue
		case string:
			top := len(path) - 1
			isKey := top >= 0 && !path[top].array && !path[top].hasKey
			if why := badString(raw[bytes.IndexByte(raw, '"'):]); why != "" {
				field := fieldPath(path)
				if isKey {
					why = "an object key " + why
				}
				if field == "" {
					field = "body"
				}
				return badField(field, "%s; send UTF-8 text (a character outside the BMP as its surrogate pair, or as itself)", why)
			}
			if isKey {
				path[top].key, path[top].hasKey = tok, true
				continue
			}
		}
		advance(path)
	}
}

// frame is one open object or array on the way to a value.
type frame struct {
	array bool
	// index is the array element being read.
	index int
	// key is the object member being read, once hasKey.
	key    string
	hasKey bool
}

// advance records that the value of the innermost member or element was
// read: an object waits for its next key, an array counts its element.
func advance(path []frame) {
	if len(path) == 0 {
		return
	}
	top := &path[len(path)-1]
	if top.array {
		top.index++
		return
	}
	top.hasKey = false
}

// fieldPath names the value being read, in the API's field syntax:
// notifications[0].payload.text.
func fieldPath(path []frame) string {
	var b strings.Builder
	for _, f := range path {
		switch {
		case f.array:
			b.WriteString("[" + strconv.Itoa(f.index) + "]")
		case f.hasKey:
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(f.key)
		}
	}
	return b.String()
}

// mayHoldSurrogate reports whether body has a \u escape in the surrogate
// range (\ud800 to \udfff, any case). It may report an escaped backslash
// followed by such text ("\\ud800"), which checkText's walk then passes.
func mayHoldSurrogate(body []byte) bool {
	for i := 0; ; {
		j := bytes.Index(body[i:], []byte(`\u`))
		if j < 0 {
			return false
		}
		i += j + 2
		if i+1 < len(body) && (body[i] == 'd' || body[i] == 'D') && strings.IndexByte("89abcdefABCDEF", body[i+1]) >= 0 {
			return true
		}
	}
}

// badString says what is wrong with the raw JSON string s (its quotes
// included), or "" when it is text.
func badString(s []byte) string {
	s = s[1 : len(s)-1]
	for i := 0; i < len(s); {
		if s[i] != '\\' {
			r, n := utf8.DecodeRune(s[i:])
			if r == utf8.RuneError && n == 1 {
				return fmt.Sprintf("is not valid UTF-8 (byte 0x%02x)", s[i])
			}
			i += n
			continue
		}
		if s[i+1] != 'u' {
			i += 2
			continue
		}
		r := hex4(s[i+2 : i+6])
		i += 6
		switch {
		case utf16.IsSurrogate(r) && r < 0xdc00:
			if i+6 <= len(s) && s[i] == '\\' && s[i+1] == 'u' {
				if low := hex4(s[i+2 : i+6]); low >= 0xdc00 && low <= 0xdfff {
					i += 6
					continue
				}
			}
			return fmt.Sprintf(`holds a lone surrogate \u%04x (a high half with no low half after it)`, r)
		case utf16.IsSurrogate(r):
			return fmt.Sprintf(`holds a lone surrogate \u%04x (a low half with no high half before it)`, r)
		}
	}
	return ""
}

// hex4 reads four hex digits, which the decoder has already checked.
func hex4(b []byte) rune {
	n, _ := strconv.ParseUint(string(b), 16, 32)
	return rune(n)
}
