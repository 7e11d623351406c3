package openapitest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

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
		if vals, ok := o.matches(r.URL.EscapedPath()); ok {
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
	for name, h := range op.headers[x.Status] {
		v, sent := x.Header[http.CanonicalHeaderKey(name)]
		switch {
		case !sent && h.required:
			return fmt.Errorf("%s %s %d: no %s header, which the contract requires", op.method, op.path, x.Status, name)
		case len(v) > 1:
			return fmt.Errorf("%s %s %d: %s sent %d times", op.method, op.path, x.Status, name, len(v))
		case sent:
			if err := h.value.check(name, v[0]); err != nil {
				return fmt.Errorf("%s %s %d: header %w", op.method, op.path, x.Status, err)
			}
		}
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
	return p.check(name, v)
}

// check validates v, a parameter's or a header's text, against p's schema.
func (p param) check(name, v string) error {
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
