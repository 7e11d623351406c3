// Package config reads owed's configuration from the environment: only the
// variables named with the service's prefix (OWED_*), never a bare name.
// envconfig.Process falls back to the field's own tag when the prefixed
// variable is unset, so OWED_DATABASE_URL unset and DATABASE_URL set (a
// platform-injected URL, often an owner or a superuser) would silently
// connect owed to it; a bare TOKEN, SECRET or API_KEY would fill a
// provider's credentials. Process keeps envconfig's names, defaults, types
// and errors, and drops that fallback.
//
// The package also owns the redaction of credentials in connection URLs
// (Redact), so an error about a malformed URL never repeats its password.
// It never logs, and never returns a variable's value in an error unless
// envconfig's own parse error does (a number or a duration that does not
// parse: never a secret, which is a string).
package config

import (
	"fmt"
	"io"
	"os"
	"reflect"
	"text/template"

	"github.com/kelseyhightower/envconfig"
)

// Variable is one setting of a spec: its full name and the field it fills.
type Variable struct {
	Key   string
	name  string
	field reflect.Value
	tags  reflect.StructTag
}

// Variables lists the variables Process reads for spec (a pointer to a
// struct) under prefix, named exactly as envconfig names them: envconfig's
// own walk of the struct hands each field to this package, so nested
// prefixes (`envconfig:"WEBHOOK"` → OWED_WEBHOOK_URL), embedded structs and
// ignored fields follow the library's rules rather than a copy of them.
func Variables(prefix string, spec any) ([]Variable, error) {
	var vars []Variable
	collect := func(key, name string, f reflect.Value, tags reflect.StructTag) string {
		vars = append(vars, Variable{Key: key, name: name, field: f, tags: tags})
		return ""
	}
	tmpl := template.Must(template.New("vars").Funcs(template.FuncMap{"collect": collect}).
		Parse(`{{range .}}{{collect .Key .Name .Field .Tags}}{{end}}`))
	if err := envconfig.Usaget(prefix, spec, io.Discard, tmpl); err != nil {
		return nil, err
	}
	return vars, nil
}

// Process fills spec (a pointer to a struct) from the environment as
// envconfig.Process(prefix, spec) does, reading only the prefixed names: a
// field whose variable is not set keeps its value (or takes its default
// tag), whatever unprefixed variable of the same name is set.
func Process(prefix string, spec any) error {
	vars, err := Variables(prefix, spec)
	if err != nil {
		return err
	}
	for _, v := range vars {
		if err := v.load(); err != nil {
			return err
		}
	}
	return nil
}

// load fills v's field from its variable through envconfig itself, over a
// one-field struct (the field's own name and type) whose tag is the full
// name. With no prefix, envconfig's
// fallback name is that same full name, so nothing else can be read; the
// field keeps envconfig's decoding (Decoder, Setter, TextUnmarshaler,
// durations, slices, maps) and its error, which names the variable.
func (v Variable) load() error {
	tag := fmt.Sprintf("envconfig:%q", v.Key)
	for _, k := range []string{"default", "required"} {
		if t, ok := v.tags.Lookup(k); ok {
			tag += fmt.Sprintf(" %s:%q", k, t)
		}
	}
	if _, set := os.LookupEnv(v.Key); !set && v.tags.Get("default") == "" && v.tags.Get("required") == "" {
		return nil
	}
	holder := reflect.New(reflect.StructOf([]reflect.StructField{{Name: v.name, Type: v.field.Type(), Tag: reflect.StructTag(tag)}}))
	holder.Elem().Field(0).Set(v.field)
	if err := envconfig.Process("", holder.Interface()); err != nil {
		return err
	}
	v.field.Set(holder.Elem().Field(0))
	return nil
}
