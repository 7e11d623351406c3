package api

import (
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/owedhq/owed/internal/ledger"
)

// The query-string decoders of the read routes.

// findQuery is GET /v1/notifications' query string.
type findQuery struct {
	tenant string
	filter ledger.Filter
	// from is the decoded cursor; nil for the first page.
	from *ledger.Position
}

// findParams are the query parameters GET /v1/notifications accepts.
var findParams = map[string]bool{"tenant": true, "recipient": true, "ref": true, "kind": true, "limit": true,
	"cursor": true}

// decodeFind reads the list route's query. Unknown and repeated parameters
// are rejected, as unknown JSON fields are: a typo ("recipent=") must not
// silently widen the answer to every row.
func decodeFind(q url.Values, p principal) (findQuery, *apiError) {
	var out findQuery
	for name, vals := range q {
		if !findParams[name] {
			return out, unknownField(name, "unknown query parameter; accepted: tenant, recipient, ref, kind, limit, cursor")
		}
		if len(vals) > 1 {
			return out, badField(name, "given %d times; give it once", len(vals))
		}
	}
	tenant, e := p.scope(q.Get("tenant"), "tenant")
	if e != nil {
		return out, e
	}
	for _, name := range []string{"recipient", "ref", "kind"} {
		if v := q.Get(name); strings.IndexByte(v, 0) >= 0 || !utf8.ValidString(v) {
			return out, badField(name, "must be valid UTF-8 without NUL (%%00)")
		}
	}
	out.tenant = tenant
	out.filter = ledger.Filter{Recipient: q.Get("recipient"), RefID: q.Get("ref"), Kind: q.Get("kind")}
	if _, ok := q["limit"]; ok {
		// An empty limit (limit=) is refused too: it is a client's blank,
		// not a request for the default.
		s := q.Get("limit")
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > ledger.MaxFindLimit {
			return out, badField("limit", "%q is not an integer in 1..%d", s, ledger.MaxFindLimit)
		}
		out.filter.Limit = n
	}
	if _, ok := q["cursor"]; ok {
		from, err := ledger.ParseCursor(q.Get("cursor"))
		if err != nil {
			return out, badField("cursor", "%v: pass the next_cursor of the previous page unchanged, "+
				"with the same filters", err)
		}
		out.from = &from
	}
	return out, nil
}

// decodeGet reads GET /v1/notifications/{id}: the id and the optional tenant
// query parameter.
func decodeGet(idText string, q url.Values, p principal) (string, int64, *apiError) {
	for name := range q {
		if name != "tenant" {
			return "", 0, unknownField(name, "unknown query parameter; accepted: tenant")
		}
	}
	tenant, e := p.scope(q.Get("tenant"), "tenant")
	if e != nil {
		return "", 0, e
	}
	id, err := strconv.ParseInt(idText, 10, 64)
	if err != nil || id < 1 {
		return "", 0, badField("id", "%q is not a notification id (a positive integer)", idText)
	}
	return tenant, id, nil
}
