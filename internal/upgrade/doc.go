// Package upgrade holds the upgrade and rollback tests (issue 19): release
// N, built from the commit pinned in testdata/release-n.txt, and this tree
// run against one database through a migration and back, with deliveries
// flowing. It has no code of its own; see docs/upgrade.md.
package upgrade
