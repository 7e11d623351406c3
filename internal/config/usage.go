package config

import (
	"fmt"
	"io"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"text/tabwriter"
)

// Usage writes one line per variable the specs read (pointers to structs
// filled with their defaults, as the service's LoadConfig starts from):
// the name, its Go type, its default (the spec's value, else the field's
// default tag, else "-") and its meaning from describe. It reads nothing
// from the environment, so `--help` works where the configuration does
// not, and it never prints a value read from one.
func Usage(w io.Writer, prefix string, describe map[string]string, specs ...any) error {
	seen := map[string]bool{}
	var rows [][3]string
	for _, spec := range specs {
		vars, err := Variables(prefix, spec)
		if err != nil {
			return err
		}
		for _, v := range vars {
			if seen[v.Key] {
				continue
			}
			seen[v.Key] = true
			rows = append(rows, [3]string{v.Key, v.field.Type().String(), v.defaultText()})
		}
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i][0] < rows[j][0] })
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VARIABLE\tTYPE\tDEFAULT\tMEANING")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r[0], r[1], r[2], describe[r[0]])
	}
	return tw.Flush()
}

// defaultText is what the variable is when it is not set.
func (v Variable) defaultText() string {
	if !v.field.IsZero() {
		return valueText(v.field)
	}
	if d := v.tags.Get("default"); d != "" {
		return d
	}
	if v.field.Kind() == reflect.Bool {
		return "false"
	}
	return "-"
}

// valueText writes a default the way the variable would be set to it.
func valueText(f reflect.Value) string {
	if s, ok := f.Interface().(fmt.Stringer); ok {
		return s.String()
	}
	if f.Kind() == reflect.Slice {
		parts := make([]string, f.Len())
		for i := range parts {
			parts[i] = valueText(f.Index(i))
		}
		return strings.Join(parts, ",")
	}
	return fmt.Sprint(f.Interface())
}

var (
	settingRow = regexp.MustCompile("^\\|\\s*(`OWED_[A-Z0-9_]+`(?:,\\s*`_?[A-Z0-9_]+`)*)\\s*\\|[^|]*\\|\\s*(.+?)\\s*\\|\\s*$")
	settingKey = regexp.MustCompile("`(_?[A-Z0-9_]+)`")
)

// Descriptions reads the meaning of each variable from the settings
// tables of a Markdown document (the README's `| variable | default |
// meaning |` rows), so --help and the documentation cannot say different
// things. A row may name several variables, the later ones by their
// suffix (`OWED_SENDGRID_API_KEY`, `_FROM`): a suffix names the known
// variable ending in it that shares the longest prefix with the row's first
// name. Backquotes and links are dropped from the meaning.
func Descriptions(markdown string, known []string) map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(markdown, "\n") {
		m := settingRow.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		meaning := plain(m[2])
		keys := settingKey.FindAllStringSubmatch(m[1], -1)
		first := keys[0][1]
		for _, k := range keys {
			key := k[1]
			if strings.HasPrefix(key, "_") {
				key = bySuffix(first, key, known)
			}
			if key != "" && out[key] == "" {
				out[key] = meaning
			}
		}
	}
	return out
}

// bySuffix resolves a suffix name within a row whose first name is first.
func bySuffix(first, suffix string, known []string) string {
	best, bestLen := "", -1
	for _, k := range known {
		if !strings.HasSuffix(k, suffix) {
			continue
		}
		n := 0
		for n < len(k) && n < len(first) && k[n] == first[n] {
			n++
		}
		if n > bestLen {
			best, bestLen = k, n
		}
	}
	return best
}

var mdLink = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)

// plain is a Markdown table cell as terminal text.
func plain(cell string) string {
	return strings.ReplaceAll(mdLink.ReplaceAllString(cell, "$1"), "`", "")
}

// Keys returns the names of the variables the specs read.
func Keys(prefix string, specs ...any) ([]string, error) {
	var keys []string
	for _, spec := range specs {
		vars, err := Variables(prefix, spec)
		if err != nil {
			return nil, err
		}
		for _, v := range vars {
			keys = append(keys, v.Key)
		}
	}
	return keys, nil
}
