// Package schema holds the test that keeps owed's current SQL definitions
// true (docs/sql.md). Each owner keeps the current definition of its
// tables, indexes, policies, triggers, grants and functions in its own sql
// folder (internal/ledger/sql, internal/pace/sql, ...), written once, by
// name, in CREATE form; the numbered migrations (migrations/) are the
// history that gets a database there. The test builds one database by
// running the migrations and one from the home files, and fails on any
// object the two catalogs disagree on, naming the file that defines it.
//
// The package has no code a binary runs: fresh installs and upgrades
// apply the migrations, never the home files.
package schema
