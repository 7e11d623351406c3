// Package owed carries the repository's README into the binaries: its
// settings tables are the one description of each OWED_* variable, which
// `sweeper --help` and `worker --help` print (internal/config.Descriptions).
package owed

import _ "embed"

// README is the top-level README.md.
//
//go:embed README.md
var README string
