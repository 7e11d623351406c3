package schema

import (
	"strings"
	"testing"
)

// unified returns a unified diff of two texts, line by line, with every
// line as context (definitions are short enough to read whole): the lines
// only a has start with "-", those only b has with "+". It is a longest
// common subsequence, quadratic in the line count, which a function body
// of a few hundred lines affords.
func unified(aName, bName, a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	// lcs[i][j] is the length of the longest common subsequence of al[i:]
	// and bl[j:].
	lcs := make([][]int, len(al)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(bl)+1)
	}
	for i := len(al) - 1; i >= 0; i-- {
		for j := len(bl) - 1; j >= 0; j-- {
			if al[i] == bl[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var out strings.Builder
	out.WriteString("--- " + aName + "\n+++ " + bName + "\n")
	i, j := 0, 0
	for i < len(al) || j < len(bl) {
		switch {
		case i < len(al) && j < len(bl) && al[i] == bl[j]:
			out.WriteString("  " + al[i] + "\n")
			i, j = i+1, j+1
		case i < len(al) && (j == len(bl) || lcs[i+1][j] >= lcs[i][j+1]):
			out.WriteString("- " + al[i] + "\n")
			i++
		default:
			out.WriteString("+ " + bl[j] + "\n")
			j++
		}
	}
	return out.String()
}

func TestUnified(t *testing.T) {
	got := unified("a", "b", "one\ntwo\nthree", "one\n2\nthree\nfour")
	want := "--- a\n+++ b\n  one\n- two\n+ 2\n  three\n+ four\n"
	if got != want {
		t.Fatalf("unified:\n%s\nwant:\n%s", got, want)
	}
}
