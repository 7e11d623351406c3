package tenant

import (
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	for _, id := range []string{"acme", "a", strings.Repeat("x", MaxLength), "größe", "tenant-42_eu.west"} {
		if err := Validate(id); err != nil {
			t.Errorf("Validate(%q) = %v, want nil", id, err)
		}
	}
	for _, id := range []string{"", strings.Repeat("x", MaxLength+1), strings.Repeat("ö", 65), "a\x00b", "a\nb", "\xff"} {
		if err := Validate(id); err == nil {
			t.Errorf("Validate(%q) = nil, want an error", id)
		}
	}
}
