// Package migrations embeds owed's numbered SQL migrations so every binary
// carries the schema it expects. They are applied by `owedctl migrate`.
package migrations

import "embed"

// FS holds the *.sql migration files, applied in file-name order.
//
//go:embed *.sql
var FS embed.FS
