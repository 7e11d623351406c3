package payload

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

var canonicalSeeds = []string{
	`{"text":"hi"}`, `{"b":1,"a":2,"a":3}`, `[1.50e1,-0,-0.0,1E-3,100e-1]`, `"\u0000"`, `{"k\u0000":1}`,
	`"\ud800"`, `"é\u00e9\n\u0001\u007f"`, `1e1001`, `1e-1001`, `0.` + strings.Repeat("0", 1000) + `1`,
	strings.Repeat("[", 65) + strings.Repeat("]", 65), `{} {}`, `{`, ``, `null`, `-`, `1.`, `01`,
}

// FuzzCanonical: Canonical never panics; what it accepts is JSON, within
// its bounds, and its own canonical form (printing jsonb's text form and
// reading it back changes nothing, as it does not in the database).
// TestCanonicalIsWhatTheDatabasePrints (internal/ledger) checks the form
// against PostgreSQL itself.
func FuzzCanonical(f *testing.F) {
	for _, s := range canonicalSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		canon, err := Canonical(raw)
		if err != nil {
			if !strings.Contains(err.Error(), ": ") {
				t.Fatalf("%q: error %q names no field", raw, err)
			}
			return
		}
		if !json.Valid(canon) || bytes.IndexByte(canon, 0) >= 0 || bytes.Contains(canon, []byte(`\u0000`)) {
			t.Fatalf("%q: canonical form %q is not JSON jsonb takes", raw, canon)
		}
		again, err := Canonical(canon)
		if err != nil || !bytes.Equal(again, canon) {
			t.Fatalf("%q: canonical %q is not its own canonical form (%q, %v)", raw, canon, again, err)
		}
	})
}

func TestNumericText(t *testing.T) {
	for in, want := range map[string]string{
		"0": "0", "-0": "0", "-0.0": "0.0", "1.50e1": "15.0", "1E-3": "0.001", "100e-1": "10.0",
		"0.1e1": "1", "5E+2": "500", "12.3400": "12.3400", "1.0e-2": "0.010", "-1e0": "-1", "007": "7",
	} {
		if got, err := numericText(in); err != nil || got != want {
			t.Errorf("numericText(%s) = %q, %v; want %q", in, got, err, want)
		}
	}
}
