package config

import (
	"errors"
	"net/url"
	"regexp"
	"slices"
	"strings"
)

// Redacted replaces a password in a redacted text.
const Redacted = "REDACTED"

// passwordParam finds a password given as a key=value pair: a libpq
// connection string ("host=db password=…") or a URL's query (?password=…).
var passwordParam = regexp.MustCompile(`(?i)password\s*=\s*('(?:[^'\\]|\\.)*'|[^\s&#]+)`)

// Redact returns text with every password the connection strings carry
// replaced by REDACTED. A connection string is a URL with a password in its
// user information or its query, or a libpq key=value string, and it need
// not parse: the password of postgres://owed:S3cr3t%zz@db/owed, which no
// URL parser accepts, is found all the same, in its written and its decoded
// forms. Redacting more than the password (an '@' in a query makes the
// user information look longer) is the safe way to be wrong.
func Redact(text string, connStrings ...string) string {
	var secrets []string
	for _, c := range connStrings {
		secrets = append(secrets, passwords(c)...)
	}
	// The longest first, so a password that contains another is replaced
	// whole.
	slices.SortFunc(secrets, func(a, b string) int { return len(b) - len(a) })
	for _, s := range secrets {
		text = strings.ReplaceAll(text, s, Redacted)
	}
	return text
}

// RedactError returns err with its message redacted (see Redact), or nil.
// The result does not unwrap to err: whatever err holds (a *url.Error
// quoting the whole URL) stays out of reach of a caller that logs it.
func RedactError(err error, connStrings ...string) error {
	if err == nil {
		return nil
	}
	return errors.New(Redact(err.Error(), connStrings...))
}

// passwords returns the secrets c may carry, each as written and decoded.
// A comma-separated list of URLs (OWED_NATS_URL) is read whole and one
// URL at a time.
func passwords(c string) []string {
	var found []string
	for _, part := range append([]string{c}, strings.Split(c, ",")...) {
		if _, rest, ok := strings.Cut(part, "://"); ok {
			if at := strings.LastIndex(rest, "@"); at >= 0 {
				if _, pw, ok := strings.Cut(rest[:at], ":"); ok {
					found = append(found, pw)
				}
			}
		}
		if u, err := url.Parse(strings.TrimSpace(part)); err == nil {
			if pw, ok := u.User.Password(); ok {
				found = append(found, pw)
			}
		}
	}
	for _, m := range passwordParam.FindAllStringSubmatch(c, -1) {
		found = append(found, strings.Trim(m[1], "'"))
	}
	var out []string
	for _, s := range found {
		out = append(out, s)
		if d, err := url.PathUnescape(s); err == nil && d != s {
			out = append(out, d)
		}
		if d, err := url.QueryUnescape(s); err == nil && d != s {
			out = append(out, d)
		}
	}
	return slices.DeleteFunc(out, func(s string) bool { return s == "" })
}
