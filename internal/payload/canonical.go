package payload

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Bounds on a payload's JSON that PostgreSQL's jsonb would otherwise turn
// into an error at insert time (a 500 for a request the API had accepted).
// Both are well inside what jsonb takes: it overflows a number's 131,072
// integer digits or 16,383 decimals, and its parser exhausts the default
// 2 MB stack somewhere between 9,000 and 20,000 levels of nesting.
const (
	// MaxDepth bounds the nesting of arrays and objects.
	MaxDepth = 64
	// MaxNumberDigits bounds the digits a number has before and after its
	// decimal point once its exponent is applied (1e1000 has 1,001).
	MaxNumberDigits = 1000
)

// Canonical returns raw as PostgreSQL prints it back from a jsonb column
// (payload::text): keys sorted by length then bytes, the last of duplicate
// keys kept, ", " and ": " between elements, strings escaped as jsonb
// escapes them and numbers as numeric prints them. The ledger stores this
// form, so the size it checks (len) is exactly what the database's
// octet_length(payload::text) check measures. It refuses, naming the
// top-level field, what jsonb cannot hold: NUL (\u0000) in a string or a
// key, nesting beyond MaxDepth and numbers beyond MaxNumberDigits.
func Canonical(raw []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("payload: %v", err)
	}
	if dec.More() {
		return nil, errors.New("payload: trailing data after the JSON object")
	}
	var out bytes.Buffer
	out.Grow(len(raw))
	if err := writeCanonical(&out, v, "", 0); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// writeCanonical appends v at path (a top-level field name first, as the
// error names it) and depth.
func writeCanonical(out *bytes.Buffer, v any, path string, depth int) error {
	field := func() string {
		if path == "" {
			return "payload"
		}
		return path
	}
	if depth > MaxDepth {
		return fmt.Errorf("%s: nested deeper than %d levels", field(), MaxDepth)
	}
	switch v := v.(type) {
	case nil:
		out.WriteString("null")
	case bool:
		out.WriteString(strconv.FormatBool(v))
	case json.Number:
		s, err := numericText(string(v))
		if err != nil {
			return fmt.Errorf("%s: %v", field(), err)
		}
		out.WriteString(s)
	case string:
		if strings.IndexByte(v, 0) >= 0 {
			return fmt.Errorf("%s: must not contain NUL (\\u0000)", field())
		}
		writeString(out, v)
	case []any:
		out.WriteByte('[')
		for i, e := range v {
			if i > 0 {
				out.WriteString(", ")
			}
			if err := writeCanonical(out, e, path, depth+1); err != nil {
				return err
			}
		}
		out.WriteByte(']')
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			if strings.IndexByte(k, 0) >= 0 {
				return fmt.Errorf("%s: a key must not contain NUL (\\u0000)", field())
			}
			keys = append(keys, k)
		}
		// jsonb orders keys by length first, then bytewise.
		sort.Slice(keys, func(i, j int) bool {
			if len(keys[i]) != len(keys[j]) {
				return len(keys[i]) < len(keys[j])
			}
			return keys[i] < keys[j]
		})
		out.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				out.WriteString(", ")
			}
			writeString(out, k)
			out.WriteString(": ")
			sub := path
			if sub == "" {
				sub = k
			}
			if err := writeCanonical(out, v[k], sub, depth+1); err != nil {
				return err
			}
		}
		out.WriteByte('}')
	}
	return nil
}

// writeString quotes s as PostgreSQL's escape_json does: the quote, the
// backslash and \b \f \n \r \t by name, other control characters below 0x20
// as \u00xx, everything else (DEL, '/', every non-ASCII character) as is.
func writeString(out *bytes.Buffer, s string) {
	out.WriteByte('"')
	for i := 0; i < len(s); {
		c := s[i]
		if c >= utf8.RuneSelf {
			r, n := utf8.DecodeRuneInString(s[i:])
			out.WriteRune(r)
			i += n
			continue
		}
		switch c {
		case '"':
			out.WriteString(`\"`)
		case '\\':
			out.WriteString(`\\`)
		case '\b':
			out.WriteString(`\b`)
		case '\f':
			out.WriteString(`\f`)
		case '\n':
			out.WriteString(`\n`)
		case '\r':
			out.WriteString(`\r`)
		case '\t':
			out.WriteString(`\t`)
		default:
			if c < 0x20 {
				fmt.Fprintf(out, `\u%04x`, c)
			} else {
				out.WriteByte(c)
			}
		}
		i++
	}
	out.WriteByte('"')
}

// numericText prints a JSON number as PostgreSQL's numeric does: no
// exponent, as many decimals as the input had after applying its exponent
// (1.50e1 is 15.0, 1e-3 is 0.001), no sign on zero.
func numericText(s string) (string, error) {
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	mant, expText, hasExp := strings.Cut(strings.ToLower(s), "e")
	exp := 0
	if hasExp {
		e, err := strconv.Atoi(expText)
		if err != nil || e > MaxNumberDigits || e < -MaxNumberDigits {
			return "", fmt.Errorf("number %s is beyond %d digits", s, MaxNumberDigits)
		}
		exp = e
	}
	intPart, frac, _ := strings.Cut(mant, ".")
	digits := intPart + frac
	// point is where the decimal point falls in digits once the exponent
	// is applied; it may lie before the first digit or after the last.
	point := len(intPart) + exp
	if point > MaxNumberDigits || len(digits)-point > MaxNumberDigits {
		return "", fmt.Errorf("number %s is beyond %d digits", s, MaxNumberDigits)
	}
	var whole, decimals string
	switch {
	case point <= 0:
		whole, decimals = "0", strings.Repeat("0", -point)+digits
	case point >= len(digits):
		whole = digits + strings.Repeat("0", point-len(digits))
	default:
		whole, decimals = digits[:point], digits[point:]
	}
	whole = strings.TrimLeft(whole, "0")
	if whole == "" {
		whole = "0"
	}
	text := whole
	if decimals != "" {
		text += "." + decimals
	}
	if neg && strings.Trim(digits, "0") != "" {
		text = "-" + text
	}
	return text, nil
}
