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
//   - every /v1 response carries X-Request-Id;
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
	"io"
	"mime"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

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
		responses: map[int]map[string]*jsonschema.Schema{}, codes: map[int][]string{}}
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

// matches reports whether path fills op's template, with the path
// parameters it names.
func (op *operation) matches(path string) (map[string]string, bool) {
	segs := strings.Split(path, "/")
	if len(segs) != len(op.segments) {
		return nil, false
	}
	vals := map[string]string{}
	for i, t := range op.segments {
		if strings.HasPrefix(t, "{") && strings.HasSuffix(t, "}") {
			if segs[i] == "" {
				return nil, false
			}
			vals[t[1:len(t)-1]] = segs[i]
		} else if t != segs[i] {
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

// Exchange is one request and the response it got.
type Exchange struct {
	Request     *http.Request
	RequestBody []byte
	Status      int
	Header      http.Header
	Body        []byte
}

// Check validates one exchange and records the outcome it covers.
func (s *Spec) Check(x Exchange) error {
	r := x.Request
	if strings.HasPrefix(r.URL.Path, "/v1/") && x.Header.Get(headerRequestID) == "" {
		return fmt.Errorf("%s %s: no %s on the response", r.Method, r.URL.Path, headerRequestID)
	}
	var op *operation
	var pathVals map[string]string
	pathKnown := false
	for _, o := range s.ops {
		if vals, ok := o.matches(r.URL.Path); ok {
			pathKnown = true
			if o.method == r.Method || (r.Method == http.MethodHead && o.method == http.MethodGet) {
				op, pathVals = o, vals
				break
			}
		}
	}
	if op == nil {
		want := http.StatusNotFound
		if pathKnown {
			want = http.StatusMethodNotAllowed
		}
		return s.checkRouting(x, want)
	}
	reqErr := op.checkRequest(r, pathVals, x.RequestBody)
	if reqErr != nil && (x.Status < 400 || x.Status > 499) {
		return fmt.Errorf("%s %s: the contract refuses the request (%v) but the handler answered %d",
			r.Method, r.URL.Path, reqErr, x.Status)
	}
	mts, ok := op.responses[x.Status]
	if !ok {
		return fmt.Errorf("%s %s: status %d is not documented; body %s", op.method, op.path, x.Status, x.Body)
	}
	code, err := checkBody(mts, x)
	if err != nil {
		return fmt.Errorf("%s %s %d: %w", op.method, op.path, x.Status, err)
	}
	s.record(key(op.method, op.path, x.Status, code))
	return nil
}

func (s *Spec) checkRouting(x Exchange, want int) error {
	prefix := ""
	for p := range s.routing {
		if strings.HasPrefix(x.Request.URL.Path, p) && len(p) > len(prefix) {
			prefix = p
		}
	}
	codes, ok := s.routing[prefix][x.Status]
	if !ok || x.Status != want {
		return fmt.Errorf("%s %s: no such route in the contract, so want %d, got %d", x.Request.Method,
			x.Request.URL.Path, want, x.Status)
	}
	code, err := checkBody(map[string]*jsonschema.Schema{"application/json": s.errSch}, x)
	if err != nil {
		return fmt.Errorf("%s %s %d: %w", x.Request.Method, x.Request.URL.Path, x.Status, err)
	}
	for _, c := range codes {
		if c == code {
			s.record(key("*", prefix, x.Status, code))
			return nil
		}
	}
	return fmt.Errorf("%s %s %d: code %q is not among %v", x.Request.Method, x.Request.URL.Path, x.Status, code, codes)
}

func (s *Spec) record(k string) {
	s.mu.Lock()
	s.seen[k] = true
	s.mu.Unlock()
}

// checkBody validates a response body against the schema of its media type
// and returns its error code, if it is an error.
func checkBody(mts map[string]*jsonschema.Schema, x Exchange) (string, error) {
	if len(mts) == 0 {
		return "", nil
	}
	mt, _, err := mime.ParseMediaType(x.Header.Get("Content-Type"))
	if err != nil {
		return "", fmt.Errorf("content type %q: %v", x.Header.Get("Content-Type"), err)
	}
	sch, ok := mts[mt]
	if !ok {
		return "", fmt.Errorf("content type %q is not documented", mt)
	}
	if mt != "application/json" {
		return "", nil
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(x.Body))
	if err != nil {
		return "", fmt.Errorf("body is not JSON: %v: %s", err, x.Body)
	}
	if err := sch.Validate(v); err != nil {
		return "", fmt.Errorf("body %s: %v", x.Body, err)
	}
	var e struct {
		Error struct{ Code string } `json:"error"`
	}
	json.Unmarshal(x.Body, &e)
	return e.Error.Code, nil
}

// checkRequest says why the contract refuses r, or nil.
func (op *operation) checkRequest(r *http.Request, pathVals map[string]string, body []byte) error {
	if op.secured && !strings.HasPrefix(r.Header.Get("Authorization"), "Bearer ") {
		return fmt.Errorf("no bearer token")
	}
	for name, v := range pathVals {
		if err := op.checkParam("path:"+name, v); err != nil {
			return err
		}
	}
	for name, vals := range r.URL.Query() {
		if op.anyQuery {
			break
		}
		if len(vals) != 1 {
			return fmt.Errorf("query parameter %q given %d times", name, len(vals))
		}
		if err := op.checkParam("query:"+name, vals[0]); err != nil {
			return err
		}
	}
	if len(op.bodies) == 0 {
		return nil
	}
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	sch, ok := op.bodies[mt]
	if err != nil || !ok {
		// "*/*": any media type, the body unchecked (a receipt endpoint
		// reads the provider's bytes whatever they are labelled).
		if _, any := op.bodies["*/*"]; any {
			return nil
		}
		return fmt.Errorf("content type %q is not documented", r.Header.Get("Content-Type"))
	}
	if mt != "application/json" {
		return nil
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("body is not JSON: %v", err)
	}
	return sch.Validate(v)
}

func (op *operation) checkParam(name, v string) error {
	p, ok := op.params[name]
	if !ok {
		return fmt.Errorf("%s is not declared", name)
	}
	var val any = v
	if p.integer {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return fmt.Errorf("%s: %q is not an integer", name, v)
		}
		val = json.Number(strconv.FormatInt(n, 10))
	}
	if err := p.schema.Validate(val); err != nil {
		return fmt.Errorf("%s: %v", name, err)
	}
	return nil
}

// Handler wraps h: every exchange through it is checked, a violation
// failing t.
func (s *Spec) Handler(t testing.TB, h http.Handler) http.Handler {
	return s.Wrap(h, func(err error) { t.Errorf("openapi: %v", err) })
}

// Wrap wraps h: every exchange through it is checked, each violation given
// to report (for a server shared by many tests, started in a TestMain).
func (s *Spec) Wrap(h http.Handler, report func(error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body []byte
		if r.Body != nil {
			body, _ = io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		probe := r.Clone(r.Context())
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		w.Write(rec.Body.Bytes())
		if err := s.Check(Exchange{Request: probe, RequestBody: body, Status: rec.Code, Header: rec.Header(),
			Body: rec.Body.Bytes()}); err != nil {
			report(err)
		}
	})
}
