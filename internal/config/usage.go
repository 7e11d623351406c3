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

// UsageDefaulter is a spec with defaults that Usage cannot read from its
// fields, which stay zero when nothing is set: a default applied where the
// value is used (a provider's base URL), or one derived from another
// variable (the sweeper's shutdown grace, from its sweep budget).
// UsageDefaults says, by variable name, what each such variable is when it
// is not set, in the words --help shows.
type UsageDefaulter interface {
	UsageDefaults() map[string]string
}

// Defaults is a UsageDefaulter of its own, for the variables of a spec
// whose type cannot say it: Usage reads it as a spec that defines no
// variables.
type Defaults map[string]string

// UsageDefaults returns d.
func (d Defaults) UsageDefaults() map[string]string { return d }

// Usage writes one line per variable the specs read (pointers to structs
// filled with their defaults, as the service's LoadConfig starts from):
// the name, its Go type, its default (the spec's value, else what a
// UsageDefaulter among the specs says, else the field's default tag, else
// "-": nothing) and its meaning from describe. It reads nothing from the
// environment, so `--help` works where the configuration does not, and it
// never prints a value read from one.
func Usage(w io.Writer, prefix string, describe map[string]string, specs ...any) error {
	derived := map[string]string{}
	for _, spec := range specs {
		if d, ok := spec.(UsageDefaulter); ok {
			for k, v := range d.UsageDefaults() {
				derived[k] = v
			}
		}
	}
	seen := map[string]bool{}
	var rows [][3]string
	for _, spec := range specs {
		if _, only := spec.(Defaults); only {
			continue
		}
		vars, err := Variables(prefix, spec)
		if err != nil {
			return err
		}
		for _, v := range vars {
			if seen[v.Key] {
				continue
			}
			seen[v.Key] = true
			def := v.defaultText()
			if d := derived[v.Key]; d != "" && v.field.IsZero() {
				def = d
			}
			rows = append(rows, [3]string{v.Key, v.field.Type().String(), def})
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

// defaultText is what the variable is when it is not set, as far as its
// field and tags say.
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
	settingRow = regexp.MustCompile("^\\|\\s*(`OWED_[A-Z0-9_]+`(?:,\\s*`_?[A-Z0-9_]+`)*)\\s*\\|\\s*([^|]*?)\\s*\\|\\s*(.+?)\\s*\\|\\s*$")
	settingKey = regexp.MustCompile("`(_?[A-Z0-9_]+)`")
)

// Setting is one row of a Markdown settings table (`| variable | default |
// meaning |`): the variables it names, its default and its meaning as
// written, and the heading of the section it is in.
type Setting struct {
	Keys             []string
	Default, Meaning string
	Section          string
}

// Settings reads every settings row of markdown (the README's). A row may
// name several variables, the later ones by their suffix
// (`OWED_SENDGRID_API_KEY`, `_FROM`): a suffix names the known variable
// ending in it that shares the longest prefix with the row's first name.
func Settings(markdown string, known []string) []Setting {
	var out []Setting
	section := ""
	for _, line := range strings.Split(markdown, "\n") {
		if strings.HasPrefix(line, "#") {
			section = strings.TrimSpace(strings.TrimLeft(line, "#"))
			continue
		}
		m := settingRow.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		s := Setting{Default: m[2], Meaning: m[3], Section: section}
		keys := settingKey.FindAllStringSubmatch(m[1], -1)
		first := keys[0][1]
		for _, k := range keys {
			key := k[1]
			if strings.HasPrefix(key, "_") {
				key = bySuffix(first, key, known)
			}
			if key != "" {
				s.Keys = append(s.Keys, key)
			}
		}
		out = append(out, s)
	}
	return out
}

// Descriptions reads the meaning of each variable from the settings rows
// of markdown, so --help and the documentation cannot say different
// things: a row of the section whose heading contains section (a service's
// own table) first, else the first row naming the variable. Backquotes and
// links are dropped from the meaning.
func Descriptions(markdown string, known []string, section string) map[string]string {
	out := map[string]string{}
	for _, own := range []bool{true, false} {
		for _, s := range Settings(markdown, known) {
			if own != (section != "" && strings.Contains(s.Section, section)) {
				continue
			}
			for _, k := range s.Keys {
				if out[k] == "" {
					out[k] = plain(s.Meaning)
				}
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

// Keys returns the names of the variables the specs read (a Defaults among
// them reads none).
func Keys(prefix string, specs ...any) ([]string, error) {
	var keys []string
	for _, spec := range specs {
		if _, only := spec.(Defaults); only {
			continue
		}
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
