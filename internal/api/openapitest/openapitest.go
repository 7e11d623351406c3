// Package openapitest checks HTTP exchanges against owed's OpenAPI document
// (internal/api/openapi.json, api.OpenAPI) so the contract cannot drift from the handlers:
// a test wraps the handler it calls (Spec.Handler), every request and
// response through it is validated, and Spec.Unexercised names each
// documented route × status × error code no validated exchange produced.
//
// The rules, for every exchange:
//   - the response's status is documented for its operation (an unrouted
//     path or method: x-owed-routing-errors), its body validates against the
//     documented schema of its content type, and an error's code is one the
//     operation documents for that status;
//   - every /v1 response carries X-Request-Id, and every header its status
//     documents as required (Retry-After on a 429), each header documented
//     matching its schema;
//   - a request the document says is invalid (an undeclared query parameter,
//     a body off its schema, no bearer token where one is required) is
//     answered 4xx: the handlers are never looser than the contract.
//
// Schemas are JSON Schema 2020-12, OpenAPI 3.1's dialect, checked with
// santhosh-tekuri/jsonschema; the route matching is this package's own
// (the document's paths are few and literal but for {id}).
package openapitest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

const docURL = "mem:///openapi.json"

// Spec is the loaded document and what the exchanges checked so far covered.
type Spec struct {
	ops     []*operation
	routing map[string]map[int][]string // x-owed-routing-errors: path prefix → status → codes
	errSch  *jsonschema.Schema

	mu   sync.Mutex
	seen map[string]bool
}

type operation struct {
	method, path string
	segments     []string
	secured      bool
	// anyQuery is x-owed-any-query: the query string is not the API's
	// (Twilio's signed callback URL).
	anyQuery  bool
	params    map[string]param // "query:name", "path:name"
	bodies    map[string]*jsonschema.Schema
	responses map[int]map[string]*jsonschema.Schema // status → media type → schema (nil: any)
	codes     map[int][]string
	// headers are the response headers each status documents.
	headers map[int]map[string]header
}

// header is a documented response header: a required one must be sent,
// and a header sent must match its schema.
type header struct {
	required bool
	value    param
}

type param struct {
	schema  *jsonschema.Schema
	integer bool
}

// headerRequestID is api.HeaderRequestID (this package cannot import api:
// api's tests import it).
const headerRequestID = "X-Request-Id"

// Load compiles every schema of raw, the document (api.OpenAPI()).
func Load(raw []byte) (*Spec, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	if err := c.AddResource(docURL, doc); err != nil {
		return nil, err
	}
	var d struct {
		Security []map[string]any                    `json:"security"`
		Routing  map[string]map[string][]string      `json:"x-owed-routing-errors"`
		Paths    map[string]map[string]operationJSON `json:"paths"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		return nil, err
	}
	s := &Spec{routing: map[string]map[int][]string{}, seen: map[string]bool{}}
	if s.errSch, err = c.Compile(docURL + "#/components/schemas/Error"); err != nil {
		return nil, err
	}
	for prefix, byStatus := range d.Routing {
		s.routing[prefix] = map[int][]string{}
		for st, codes := range byStatus {
			n, err := strconv.Atoi(st)
			if err != nil {
				return nil, fmt.Errorf("x-owed-routing-errors: %q is not a status", st)
			}
			s.routing[prefix][n] = codes
		}
	}
	for path, methods := range d.Paths {
		for method, o := range methods {
			op, err := compileOperation(c, path, strings.ToUpper(method), o, len(d.Security) > 0)
			if err != nil {
				return nil, fmt.Errorf("%s %s: %w", method, path, err)
			}
			s.ops = append(s.ops, op)
		}
	}
	// Literal paths before templated ones, as the mux routes them.
	sort.SliceStable(s.ops, func(i, j int) bool {
		return strings.Count(s.ops[i].path, "{") < strings.Count(s.ops[j].path, "{")
	})
	return s, nil
}

type operationJSON struct {
	Security   *[]map[string]any `json:"security"`
	AnyQuery   bool              `json:"x-owed-any-query"`
	Parameters []struct {
		Name   string         `json:"name"`
		In     string         `json:"in"`
		Schema map[string]any `json:"schema"`
	} `json:"parameters"`
	RequestBody *struct {
		Content map[string]json.RawMessage `json:"content"`
	} `json:"requestBody"`
	Responses map[string]struct {
		Headers map[string]struct {
			Required bool           `json:"required"`
			Schema   map[string]any `json:"schema"`
		} `json:"headers"`
		Content map[string]struct {
			Schema struct {
				Properties struct {
					Error struct {
						Properties struct {
							Code struct {
								Enum []string `json:"enum"`
							} `json:"code"`
						} `json:"properties"`
					} `json:"error"`
				} `json:"properties"`
			} `json:"schema"`
		} `json:"content"`
	} `json:"responses"`
}

// pointer is the JSON pointer fragment of a document location.
func pointer(tokens ...string) string {
	var b strings.Builder
	for _, t := range tokens {
		t = strings.NewReplacer("~", "~0", "/", "~1").Replace(t)
		b.WriteString("/" + url.PathEscape(t))
	}
	return docURL + "#" + b.String()
}

func compileOperation(c *jsonschema.Compiler, path, method string, o operationJSON, secDefault bool) (*operation, error) {
	lower := strings.ToLower(method)
	op := &operation{method: method, path: path, segments: strings.Split(path, "/"), secured: secDefault,
		params: map[string]param{}, bodies: map[string]*jsonschema.Schema{},
		responses: map[int]map[string]*jsonschema.Schema{}, codes: map[int][]string{},
		headers: map[int]map[string]header{}}
	if o.Security != nil {
		op.secured = len(*o.Security) > 0
	}
	op.anyQuery = o.AnyQuery
	for i, p := range o.Parameters {
		sch, err := c.Compile(pointer("paths", path, lower, "parameters", strconv.Itoa(i), "schema"))
		if err != nil {
			return nil, err
		}
		op.params[p.In+":"+p.Name] = param{schema: sch, integer: p.Schema["type"] == "integer"}
	}
	if o.RequestBody != nil {
		for mt := range o.RequestBody.Content {
			sch, err := c.Compile(pointer("paths", path, lower, "requestBody", "content", mt, "schema"))
			if err != nil {
				return nil, err
			}
			op.bodies[mt] = sch
		}
	}
	for st, r := range o.Responses {
		n, err := strconv.Atoi(st)
		if err != nil {
			return nil, fmt.Errorf("response %q is not a status", st)
		}
		op.responses[n] = map[string]*jsonschema.Schema{}
		op.headers[n] = map[string]header{}
		for name, h := range r.Headers {
			sch, err := c.Compile(pointer("paths", path, lower, "responses", st, "headers", name, "schema"))
			if err != nil {
				return nil, err
			}
			op.headers[n][name] = header{required: h.Required,
				value: param{schema: sch, integer: h.Schema["type"] == "integer"}}
		}
		for mt, ct := range r.Content {
			sch, err := c.Compile(pointer("paths", path, lower, "responses", st, "content", mt, "schema"))
			if err != nil {
				return nil, err
			}
			op.responses[n][mt] = sch
			op.codes[n] = append(op.codes[n], ct.Schema.Properties.Error.Properties.Code.Enum...)
		}
	}
	return op, nil
}

// matches reports whether the escaped path (url.URL.EscapedPath) fills
// op's template, with the path parameters it names, unescaped. Segments
// are split before unescaping, as net/http's ServeMux splits them: an
// escaped slash ("0%2F") is part of one segment, not a second one.
func (op *operation) matches(escaped string) (map[string]string, bool) {
	segs := strings.Split(escaped, "/")
	if len(segs) != len(op.segments) {
		return nil, false
	}
	vals := map[string]string{}
	for i, t := range op.segments {
		seg, err := url.PathUnescape(segs[i])
		switch {
		case err != nil:
			return nil, false
		case strings.HasPrefix(t, "{") && strings.HasSuffix(t, "}"):
			if seg == "" {
				return nil, false
			}
			vals[t[1:len(t)-1]] = seg
		case t != seg:
			return nil, false
		}
	}
	return vals, true
}

// Key names one documented outcome: "METHOD PATH STATUS CODE" (CODE empty
// for a success), or "* PREFIX STATUS CODE" for the unrouted answers under
// a path prefix.
func key(method, path string, status int, code string) string {
	return strings.TrimSpace(fmt.Sprintf("%s %s %d %s", method, path, status, code))
}

// Keys lists every documented outcome under path prefix.
func (s *Spec) Keys(prefix string) []string {
	var out []string
	for _, op := range s.ops {
		if !strings.HasPrefix(op.path, prefix) {
			continue
		}
		for st := range op.responses {
			if codes := op.codes[st]; len(codes) > 0 {
				for _, c := range codes {
					out = append(out, key(op.method, op.path, st, c))
				}
			} else {
				out = append(out, key(op.method, op.path, st, ""))
			}
		}
	}
	for p, byStatus := range s.routing {
		if !strings.HasPrefix(p, prefix) {
			continue
		}
		for st, codes := range byStatus {
			for _, c := range codes {
				out = append(out, key("*", p, st, c))
			}
		}
	}
	sort.Strings(out)
	return out
}

// Unexercised lists the documented outcomes under prefix that no checked
// exchange produced.
func (s *Spec) Unexercised(prefix string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, k := range s.Keys(prefix) {
		if !s.seen[k] {
			out = append(out, k)
		}
	}
	return out
}
